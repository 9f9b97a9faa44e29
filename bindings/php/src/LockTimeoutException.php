<?php

declare(strict_types=1);

namespace Lockffi;

/**
 * getLock: the lock did not come free within the wait (code LOCK_TIMEOUT).
 * Nothing is held; the message names what stood in the way: the holder (pid,
 * host, since, expiry), a cooldown, or the queue ahead.
 */
class LockTimeoutException extends LockException
{
}
