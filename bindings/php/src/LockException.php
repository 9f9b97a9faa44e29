<?php

declare(strict_types=1);

namespace Lockffi;

/**
 * A lock call that did not succeed. The code is the library's lock_result
 * (LOCK_BUSY 3, LOCK_TIMEOUT 4, errors from 100: LOCK_ERR_NOT_FOUND 300, ...);
 * the message is the call, the key, and the library's own account of the
 * failure (lock_last_error_message): the path, the cause, the holder.
 */
class LockException extends \RuntimeException
{
}
