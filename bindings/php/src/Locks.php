<?php

declare(strict_types=1);

namespace Lockffi;

use FFI;
use FFI\CData;

/**
 * Locks named by keys, all of one scheme and one place: the object's
 * template, a spec with {key} in it, names the lock of every key.
 *
 *     $locks = Locks::inDirectory('lease', '/run/lock/myapp');
 *     $fence = $locks->getLock('cron-report', 0, 3600);   // or LockTimeoutException
 *     ... the work ...
 *     $locks->releaseLock('cron-report');                 // or LockExpiredException, LockLostException
 *
 * Times are seconds (floats, as microtime(true)); the library counts in
 * milliseconds, and every time is rounded up to the next one.
 *
 * The object releases every lock it still holds when it is destroyed, and
 * at the end of the request after a fatal error, when PHP calls no
 * destructor. That is what releases a forgotten lock under php-fpm, mod_php
 * or any other persistent worker: the library's own release at process exit
 * never comes, because the worker does not exit between requests.
 *
 * Two objects exclude each other as two processes do. After pcntl_fork, a
 * lock the parent held stays the parent's: the child's calls on it throw
 * (code LOCK_ERR_FORKED), and the child's copy of the object leaves it alone
 * when it is destroyed.
 */
final class Locks
{
    /**
     * RedisLock's policy 0: give up at once, without waiting, when the
     * holder's maxExecuteTime (or a cooldown) runs past the end of timeWait,
     * since the lock can then only come free by an early release. A holder
     * that will run out within the wait is waited for, and broken when it
     * has.
     */
    public const POLICY_GIVE_UP_EARLY = 0;

    /**
     * RedisLock's policy 1: wait for the lock for the whole timeWait. The
     * library waits with backoff (or, for toplock, in its queue) rather than
     * polling every 10 ms.
     */
    public const POLICY_WAIT = 1;

    /** The placeholder the template's key goes into. */
    public const KEY = '{key}';

    /** lock_acquire's LOCK_WAIT_FOREVER, UINT64_MAX, as FFI converts a PHP int to uint64_t. */
    private const WAIT_FOREVER = -1;

    private readonly FFI $ffi;

    /** @var array<string, CData> the lock_handle* of every lock this object holds, by key */
    private array $held = [];

    /** @var array<string, int> the fence of every lock this object holds, by key */
    private array $fences = [];

    /**
     * @param string $template a lock spec with {key} where the key goes,
     *   percent-encoded as specs are: 'lockfile:/srv/board/{key}?mode=0660'
     *   (lockfile's target is the file protected, every other scheme's the
     *   lock itself). No ttl: getLock's maxExecuteTime gives it.
     */
    public function __construct(private readonly string $template)
    {
        if (!str_contains($template, self::KEY)) {
            throw new \InvalidArgumentException("lock template '$template' has no " . self::KEY . ' for the key');
        }
        if (preg_match('/[?&](ttl|hold)=/', $template) === 1) {
            throw new \InvalidArgumentException(
                "lock template '$template' sets the ttl, which getLock's maxExecuteTime gives"
            );
        }
        $this->ffi = Library::ffi();
        // Shutdown functions run after a fatal error too (memory_limit,
        // max_execution_time), destructors do not. The weak reference
        // leaves the object's lifetime to its holders.
        $self = \WeakReference::create($this);
        register_shutdown_function(static function () use ($self): void {
            $self->get()?->releaseAll('at the end of the request');
        });
    }

    /**
     * Locks of `$scheme` kept in `$directory`, with the spec options
     * `$options` (['mode' => '0660'], ...): the key 'report' is the lock
     * `$scheme:$directory/report` (for lockfile the file protected, whose
     * lock is `report.lock`).
     *
     * @param array<string, string|int> $options
     */
    public static function inDirectory(string $scheme, string $directory, array $options = []): self
    {
        $target = implode('/', array_map('rawurlencode', explode('/', rtrim($directory, '/')))) . '/' . self::KEY;
        $query = implode('&', array_map(
            static fn (string $name, string|int $value): string => rawurlencode($name) . '=' . rawurlencode((string) $value),
            array_keys($options),
            $options
        ));
        return new self("$scheme:$target" . ($query === '' ? '' : "?$query"));
    }

    /**
     * Takes the lock of `$key` and returns its fencing token, greater than
     * that of every earlier acquisition of this lock: hand it to the storage
     * you write to, so that it can refuse a holder whose time ran out.
     *
     * @param float $timeWait seconds to wait for the lock; 0: one attempt; INF: no limit
     * @param float $maxExecuteTime seconds after which others may break the
     *   lock (its ttl); 0: never
     * @param int $policy POLICY_WAIT or POLICY_GIVE_UP_EARLY
     * @throws LockTimeoutException the lock did not come free in time
     * @throws LockException the spec or the lock's files are wrong
     *   (the code and message say how), or this object holds it already
     */
    public function getLock(
        string $key,
        float $timeWait = 0,
        float $maxExecuteTime = 3600,
        int $policy = self::POLICY_WAIT
    ): int {
        $operation = "getLock('$key')";
        if ($policy !== self::POLICY_WAIT && $policy !== self::POLICY_GIVE_UP_EARLY) {
            throw new \InvalidArgumentException("$operation: unknown policy $policy");
        }
        if (isset($this->held[$key])) {
            throw new LockException(
                "$operation: this Locks object holds it already (fence {$this->fences[$key]})",
                $this->ffi->LOCK_ERR_ALREADY_HELD
            );
        }
        $wait = $timeWait === INF ? self::WAIT_FOREVER : self::milliseconds($operation, 'timeWait', $timeWait);
        $handle = $this->open($operation, $key, $maxExecuteTime);
        $fence = $this->ffi->new('uint64_t');
        try {
            if ($policy === self::POLICY_GIVE_UP_EARLY && $wait !== self::WAIT_FOREVER) {
                $obstacle = $this->outlastingObstacle($operation, $handle, $wait);
                if ($obstacle !== null) {
                    throw new LockTimeoutException(
                        "$operation: gave up at once (POLICY_GIVE_UP_EARLY): $obstacle, past the wait of $timeWait s",
                        $this->ffi->LOCK_TIMEOUT
                    );
                }
            }
            $result = $this->ffi->lock_acquire($handle, $wait, FFI::addr($fence));
            if ($result !== $this->ffi->LOCK_OK) {
                throw $this->failure($operation, $result);
            }
        } catch (\Throwable $e) {
            // Holds nothing: closing it releases nothing and cannot fail.
            $this->ffi->lock_close($handle);
            throw $e;
        }
        $this->held[$key] = $handle;
        $this->fences[$key] = $fence->cdata;
        return $fence->cdata;
    }

    /**
     * Releases the lock of `$key`, and keeps it closed to everyone for
     * `$delayAfter` seconds (a cooldown, so that a failover cannot flap).
     *
     * @throws LockExpiredException held past its maxExecuteTime, nobody took it: released
     * @throws LockLostException someone else holds it now: nothing released
     * @throws LockBusyException the lock's guard stayed locked by another
     *   process: still held, try again
     * @throws LockException not held by this object, or another error
     */
    public function releaseLock(string $key, float $delayAfter = 0): void
    {
        $operation = "releaseLock('$key')";
        $handle = $this->heldHandle($operation, $key);
        $result = $this->ffi->lock_release($handle, self::milliseconds($operation, 'delayAfter', $delayAfter));
        if ($result === $this->ffi->LOCK_OK) {
            $this->forget($key);
            return;
        }
        $failure = $this->failure($operation, $result);
        if ($result === $this->ffi->LOCK_EXPIRED || $result === $this->ffi->LOCK_LOST) {
            $this->forget($key);
        }
        throw $failure;
    }

    /**
     * Moves the expiry of the held lock of `$key` to `$timeProlongate`
     * seconds from now (0: getLock's maxExecuteTime again).
     *
     * @throws LockExpiredException it had run out, nobody took it: held again now
     * @throws LockLostException someone else holds it now: no longer held
     * @throws LockBusyException the lock's files stayed locked by another
     *   process: nothing changed, try again
     * @throws LockException not held by this object, or another error
     */
    public function prolongate(string $key, float $timeProlongate): void
    {
        $operation = "prolongate('$key')";
        $handle = $this->heldHandle($operation, $key);
        $result = $this->ffi->lock_prolong($handle, self::milliseconds($operation, 'timeProlongate', $timeProlongate));
        if ($result === $this->ffi->LOCK_OK) {
            return;
        }
        $failure = $this->failure($operation, $result);
        if ($result === $this->ffi->LOCK_LOST) {
            $this->forget($key);
        }
        throw $failure;
    }

    /** Whether this object holds the lock of `$key`. */
    public function holds(string $key): bool
    {
        return isset($this->held[$key]);
    }

    /**
     * The fencing token of the lock of `$key`, which this object holds.
     *
     * @throws LockException not held by this object
     */
    public function fence(string $key): int
    {
        $this->heldHandle("fence('$key')", $key);
        return $this->fences[$key];
    }

    /**
     * The state of the lock of `$key`, read without taking it. Times are Unix
     * seconds, null for never or unknown.
     *
     * @return array{held: bool, heldByThis: bool, stale: bool, owner: string,
     *   ownerPid: ?int, ownerHost: ?string, fence: int, lastFence: int,
     *   expiresAt: ?float, cooldownUntil: ?float, since: ?float, queueLength: int}
     *   owner is 'alive', 'dead' (the next acquirer breaks the lock) or
     *   'unknown' (another host, or free); fence is the holder's token, 0 if
     *   free; queueLength counts toplock's queue, holder included
     * @throws LockException
     */
    public function inspect(string $key): array
    {
        $operation = "inspect('$key')";
        return $this->withHandle(
            $operation,
            $key,
            fn (CData $handle): array => $this->state($this->info($operation, $handle)),
        );
    }

    /**
     * The holder whose stale lock the acquisition of `$key` that this object
     * holds broke, as judged then, in `inspect`'s fields: one that died
     * holding it (owner 'dead'), or ran past its expiry, so that what it
     * protected may be half-done; null if the lock was free.
     *
     * @return ?array{held: bool, heldByThis: bool, stale: bool, owner: string,
     *   ownerPid: ?int, ownerHost: ?string, fence: int, lastFence: int,
     *   expiresAt: ?float, cooldownUntil: ?float, since: ?float, queueLength: int}
     * @throws LockException not held by this object
     */
    public function tookOver(string $key): ?array
    {
        $operation = "tookOver('$key')";
        $previous = $this->ffi->new('lock_info');
        $result = $this->ffi->lock_took_over($this->heldHandle($operation, $key), FFI::addr($previous));
        if ($result !== $this->ffi->LOCK_OK) {
            throw $this->failure($operation, $result);
        }
        return $previous->held ? $this->state($previous) : null;
    }

    /**
     * The path that is the lock of `$key` (lock file, directory, symlink,
     * flock'd file, lease or queue), for operators and logs.
     *
     * @throws LockException
     */
    public function path(string $key): string
    {
        $operation = "path('$key')";
        return $this->withHandle($operation, $key, function (CData $handle) use ($operation): string {
            $length = $this->ffi->new('size_t');
            $capacity = 4096;
            while (true) {
                $buffer = $this->ffi->new("char[$capacity]");
                $result = $this->ffi->lock_path($handle, $buffer, $capacity, FFI::addr($length));
                if ($result === $this->ffi->LOCK_OK) {
                    return FFI::string($buffer, $length->cdata);
                }
                if ($result !== $this->ffi->LOCK_ERR_BUFFER_TOO_SMALL) {
                    throw $this->failure($operation, $result);
                }
                $capacity = $length->cdata + 1;
            }
        });
    }

    /** Releases every lock this object still holds; a failure is a warning. */
    public function __destruct()
    {
        $this->releaseAll('as its Locks object is destroyed');
    }

    /** A copy would release the same locks a second time. */
    private function __clone()
    {
    }

    private function releaseAll(string $when): void
    {
        foreach ($this->held as $key => $handle) {
            $result = $this->ffi->lock_close($handle);
            if ($result !== $this->ffi->LOCK_OK) {
                $failure = $this->failure("releasing '$key' $when", $result);
                trigger_error($failure->getMessage(), E_USER_WARNING);
            }
        }
        $this->held = [];
        $this->fences = [];
    }

    /** The spec of the lock of `$key`, with a ttl of `$maxExecuteTime` seconds unless 0. */
    private function spec(string $operation, string $key, float $maxExecuteTime): string
    {
        if ($key === '' || $key === '.' || $key === '..' || strpbrk($key, "/\0") !== false) {
            throw new \InvalidArgumentException(
                "$operation: a key is one file name: not empty, '.' or '..', and without '/' or NUL"
            );
        }
        $spec = str_replace(self::KEY, rawurlencode($key), $this->template);
        $ttl = self::milliseconds($operation, 'maxExecuteTime', $maxExecuteTime);
        if ($ttl > 0) {
            $spec .= (str_contains($spec, '?') ? '&' : '?') . "ttl={$ttl}ms";
        }
        return $spec;
    }

    private function open(string $operation, string $key, float $maxExecuteTime): CData
    {
        $spec = $this->spec($operation, $key, $maxExecuteTime);
        $handle = $this->ffi->new('lock_handle*');
        $result = $this->ffi->lock_open($spec, FFI::addr($handle));
        if ($result !== $this->ffi->LOCK_OK) {
            throw $this->failure("$operation: spec '$spec'", $result);
        }
        return $handle;
    }

    /**
     * Runs `$use` with the handle this object holds the lock of `$key` by,
     * or with a handle opened for the call.
     *
     * @template T
     * @param callable(CData): T $use
     * @return T
     */
    private function withHandle(string $operation, string $key, callable $use): mixed
    {
        if (isset($this->held[$key])) {
            return $use($this->held[$key]);
        }
        $handle = $this->open($operation, $key, 0);
        try {
            return $use($handle);
        } finally {
            // Holds nothing: closing it releases nothing and cannot fail.
            $this->ffi->lock_close($handle);
        }
    }

    private function heldHandle(string $operation, string $key): CData
    {
        if (!isset($this->held[$key])) {
            throw new LockException("$operation: this Locks object does not hold it", $this->ffi->LOCK_ERR_NOT_HELD);
        }
        return $this->held[$key];
    }

    /** Frees the handle of `$key`, which holds nothing any more. */
    private function forget(string $key): void
    {
        // Holds nothing: closing it releases nothing and cannot fail.
        $this->ffi->lock_close($this->held[$key]);
        unset($this->held[$key], $this->fences[$key]);
    }

    /** A `lock_info` as the array `inspect` returns. */
    private function state(CData $info): array
    {
        $seconds = static fn (int $unixMs): ?float => $unixMs === 0 ? null : $unixMs / 1000;
        return [
            'held' => $info->held,
            'heldByThis' => $info->held_by_this_handle,
            'stale' => $info->stale,
            'owner' => match ($info->owner_liveness) {
                $this->ffi->LOCK_OWNER_ALIVE => 'alive',
                $this->ffi->LOCK_OWNER_DEAD => 'dead',
                default => 'unknown',
            },
            'ownerPid' => $info->owner_pid === 0 ? null : $info->owner_pid,
            'ownerHost' => FFI::string($info->owner_host) === '' ? null : FFI::string($info->owner_host),
            'fence' => $info->fence,
            'lastFence' => $info->last_fence,
            'expiresAt' => $seconds($info->expires_unix_ms),
            'cooldownUntil' => $seconds($info->cooldown_until_unix_ms),
            'since' => $seconds($info->since_unix_ms),
            'queueLength' => $info->queue_length,
        ];
    }

    private function info(string $operation, CData $handle): CData
    {
        $info = $this->ffi->new('lock_info');
        $result = $this->ffi->lock_inspect($handle, FFI::addr($info));
        if ($result !== $this->ffi->LOCK_OK) {
            throw $this->failure($operation, $result);
        }
        return $info;
    }

    /**
     * What keeps the lock closed past `$waitMs` from now unless its holder
     * lets go early: a holder that does not run out by then (and is not
     * stale already), or a cooldown; null if there is nothing such.
     */
    private function outlastingObstacle(string $operation, CData $handle, int $waitMs): ?string
    {
        $info = $this->info($operation, $handle);
        $deadline = (int) floor(microtime(true) * 1000) + $waitMs;
        if ($info->cooldown_until_unix_ms > $deadline) {
            return 'cooling down until ' . self::time($info->cooldown_until_unix_ms);
        }
        if ($info->held && !$info->stale && ($info->expires_unix_ms === 0 || $info->expires_unix_ms > $deadline)) {
            $host = FFI::string($info->owner_host);
            return sprintf(
                'held by pid %d%s, %s',
                $info->owner_pid,
                $host === '' ? '' : " on \"$host\"",
                $info->expires_unix_ms === 0 ? 'never expiring' : 'expiring ' . self::time($info->expires_unix_ms)
            );
        }
        return null;
    }

    /** The exception for `$result`, with this thread's last library message. */
    private function failure(string $operation, int $result): LockException
    {
        $length = $this->ffi->lock_last_error_message(null, 0);
        if ($length > 0) {
            $buffer = $this->ffi->new('char[' . ($length + 1) . ']');
            $this->ffi->lock_last_error_message($buffer, $length + 1);
            $why = FFI::string($buffer, $length);
        } else {
            $why = $this->ffi->lock_strerror($result);
        }
        $class = match ($result) {
            $this->ffi->LOCK_TIMEOUT => LockTimeoutException::class,
            $this->ffi->LOCK_EXPIRED => LockExpiredException::class,
            $this->ffi->LOCK_LOST => LockLostException::class,
            $this->ffi->LOCK_BUSY => LockBusyException::class,
            default => LockException::class,
        };
        return new $class("$operation: $why", $result);
    }

    /** `$seconds` as whole milliseconds, rounded up. */
    private static function milliseconds(string $operation, string $name, float $seconds): int
    {
        if (!($seconds >= 0 && $seconds * 1000 < PHP_INT_MAX)) {
            throw new \InvalidArgumentException("$operation: $name must be a number of seconds from 0 to " . intdiv(PHP_INT_MAX, 1000) . ", not $seconds");
        }
        return (int) ceil($seconds * 1000);
    }

    private static function time(int $unixMs): string
    {
        return gmdate('Y-m-d\\TH:i:s', intdiv($unixMs, 1000)) . sprintf('.%03dZ', $unixMs % 1000);
    }
}
