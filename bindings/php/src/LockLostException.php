<?php

declare(strict_types=1);

namespace Lockffi;

/**
 * releaseLock or prolongate: someone else holds the lock now (code
 * LOCK_LOST): ours ran past its maxExecuteTime, or its owner was judged dead,
 * and it was taken over. Nothing was changed, and this object no longer
 * holds the lock: what was written under it may have raced with the new
 * holder.
 */
class LockLostException extends LockException
{
}
