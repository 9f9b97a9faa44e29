<?php

declare(strict_types=1);

namespace Lockffi;

/**
 * The file that orders every change to the lock stayed locked by another
 * process for the call's whole patience (code LOCK_BUSY): a process stopped
 * inside a lock call, or another user holding it on purpose. Nothing was
 * changed (a held lock is still held); the call may be tried again.
 */
class LockBusyException extends LockException
{
}
