<?php

declare(strict_types=1);

namespace Lockffi;

/**
 * releaseLock or prolongate: the lock was held past its maxExecuteTime, but
 * nobody took it (code LOCK_EXPIRED). releaseLock has released it;
 * prolongate holds it again with the new time. What ran after the expiry was
 * not protected: another process could have taken the lock meanwhile.
 */
class LockExpiredException extends LockException
{
}
