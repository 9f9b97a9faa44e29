<?php

// The PHP binding's tests, run with php-cli and nothing else:
//
//     LOCKFFI_LIBRARY=target/debug/liblockffi.so php bindings/php/tests/run.php
//
// Every function named test_* is a test; it gets a fresh private directory,
// removed afterwards. One line per test, PASS or FAIL; the exit status is 1
// if any failed.

declare(strict_types=1);

require __DIR__ . '/../autoload.php';
require __DIR__ . '/support.php';

use Lockffi\LockBusyException;
use Lockffi\LockException;
use Lockffi\LockExpiredException;
use Lockffi\LockLostException;
use Lockffi\Locks;
use Lockffi\LockTimeoutException;

function test_fences_increase_across_holders(string $dir): void
{
    foreach (SCHEMES as $scheme) {
        $first = Locks::inDirectory($scheme, "$dir/$scheme");
        $second = Locks::inDirectory($scheme, "$dir/$scheme");
        mkdir("$dir/$scheme", 0700);
        $previous = 0;
        foreach ([$first, $second, $first, $second] as $locks) {
            $fence = $locks->getLock('job', 0, 30);
            check($fence > $previous, "$scheme: fence $fence after $previous");
            check($locks->fence('job') === $fence, "$scheme: fence() says {$locks->fence('job')}, getLock said $fence");
            $state = $locks->inspect('job');
            check($state['held'] && $state['heldByThis'], "$scheme: inspect of a held lock: " . json_encode($state));
            check($state['fence'] === $fence && $state['lastFence'] === $fence, "$scheme: inspect's fences " . json_encode($state));
            check($state['ownerPid'] === getmypid(), "$scheme: inspect's owner " . json_encode($state));
            $locks->releaseLock('job');
            check(!$locks->holds('job'), "$scheme: still holds after releaseLock");
            $previous = $fence;
        }
        check(!$first->inspect('job')['held'], "$scheme: held after every release");
    }
}

function test_timeout_names_the_holder_and_takes_nothing(string $dir): void
{
    foreach (SCHEMES as $scheme) {
        [$holder, $waiter] = two_objects($scheme, "$dir/$scheme");
        $holder->getLock('job', 0, 30);
        foreach ([0, 0.2] as $wait) {
            $e = expect_exception(LockTimeoutException::class, fn () => $waiter->getLock('job', $wait, 30), "$scheme, wait $wait");
            check($e->getCode() === 4, "$scheme: code {$e->getCode()}, not LOCK_TIMEOUT");
            check(str_contains($e->getMessage(), "getLock('job')"), "$scheme: message without the call: {$e->getMessage()}");
            check(str_contains($e->getMessage(), 'held by pid ' . getmypid()), "$scheme: message without the holder: {$e->getMessage()}");
            check(!$waiter->holds('job'), "$scheme: a timed-out getLock holds the lock");
        }
        $holder->releaseLock('job');
        $waiter->getLock('job', 0, 30);
        check($waiter->holds('job'), "$scheme: not taken after the holder released it");
    }
}

function test_expired_when_nobody_took_it(string $dir): void
{
    foreach (SCHEMES as $scheme) {
        [$holder, $next] = two_objects($scheme, "$dir/$scheme");
        $holder->getLock('job', 0, 0.05);
        wait_past_expiry($holder, $scheme, 'job');
        $e = expect_exception(LockExpiredException::class, fn () => $holder->releaseLock('job'), $scheme);
        check($e->getCode() === 1, "$scheme: code {$e->getCode()}, not LOCK_EXPIRED");
        check(!$holder->holds('job'), "$scheme: still held after an expired release");
        $next->getLock('job', 0, 30);

        $next->releaseLock('job');
        $holder->getLock('job', 0, 0.05);
        wait_past_expiry($holder, $scheme, 'job');
        expect_exception(LockExpiredException::class, fn () => $holder->prolongate('job', 30), "$scheme: prolongate");
        check($holder->holds('job'), "$scheme: an expired prolongate holds the lock again");
        expect_exception(LockTimeoutException::class, fn () => $next->getLock('job', 0, 30), "$scheme: after prolongate");
        $holder->releaseLock('job');
    }
}

function test_lost_when_someone_took_it(string $dir): void
{
    // flock is left out: nobody can take a flock lock from a live holder,
    // so it is never lost.
    foreach (array_diff(SCHEMES, ['flock']) as $scheme) {
        [$holder, $taker] = two_objects($scheme, "$dir/$scheme");
        foreach (['releaseLock' => fn () => $holder->releaseLock('job'), 'prolongate' => fn () => $holder->prolongate('job', 30)] as $call => $lose) {
            $holder->getLock('job', 0, 0.05);
            wait_past_expiry($holder, $scheme, 'job');
            $takerFence = $taker->getLock('job', 0, 30);
            $previous = $taker->tookOver('job');
            check(
                $previous !== null && $previous['stale'] && $previous['ownerPid'] === getmypid() && $previous['owner'] === 'alive',
                "$scheme: $call: the taker names the holder it took over from: " . json_encode($previous),
            );
            $e = expect_exception(LockLostException::class, $lose, "$scheme: $call");
            check($e->getCode() === 2, "$scheme: $call: code {$e->getCode()}, not LOCK_LOST");
            check(!$holder->holds('job'), "$scheme: $call: still held after it was lost");
            $e = expect_exception(LockException::class, fn () => $holder->tookOver('job'), "$scheme: $call: tookOver");
            check($e->getCode() === 101, "$scheme: $call: tookOver holding nothing: code {$e->getCode()}, not LOCK_ERR_NOT_HELD");
            $state = $taker->inspect('job');
            check($state['heldByThis'] && $state['fence'] === $takerFence, "$scheme: $call: the taker's hold changed: " . json_encode($state));
            $taker->releaseLock('job');
            $taker->getLock('job', 0, 30);
            check($taker->tookOver('job') === null, "$scheme: $call: after a release the lock was taken over from nobody");
            $taker->releaseLock('job');
        }
    }
}

function test_cooldown_keeps_the_lock_closed(string $dir): void
{
    foreach (SCHEMES as $scheme) {
        [$first, $second] = two_objects($scheme, "$dir/$scheme");
        $first->getLock('job', 0, 30);
        $released = microtime(true);
        $first->releaseLock('job', 60);
        $until = $first->inspect('job')['cooldownUntil'];
        check($until !== null && $until >= $released + 59, "$scheme: cooldown until " . var_export($until, true));
        foreach ([$first, $second] as $locks) {
            expect_exception(LockTimeoutException::class, fn () => $locks->getLock('job', 0.1, 30), "$scheme: during the cooldown");
        }
        $asked = microtime(true);
        $e = expect_exception(
            LockTimeoutException::class,
            fn () => $second->getLock('job', 20, 30, Locks::POLICY_GIVE_UP_EARLY),
            "$scheme: a cooldown past the wait, POLICY_GIVE_UP_EARLY"
        );
        check(microtime(true) - $asked < 20, "$scheme: waited the whole wait before giving up");
        check(str_contains($e->getMessage(), 'cooling down until'), "$scheme: message without the cooldown: {$e->getMessage()}");

        $first->getLock('other', 0, 30);
        $released = microtime(true);
        $first->releaseLock('other', 0.3);
        $second->getLock('other', 30, 30);
        $taken = microtime(true);
        check($taken >= $released + 0.3, "$scheme: taken $taken, released $released with a cooldown of 0.3 s");
    }
}

function test_prolongate_moves_the_expiry(string $dir): void
{
    foreach (SCHEMES as $scheme) {
        [$holder, $other] = two_objects($scheme, "$dir/$scheme");
        $holder->getLock('job', 0, 60);
        $asked = microtime(true);
        $holder->prolongate('job', 120);
        $expiry = $holder->inspect('job')['expiresAt'];
        check($expiry !== null && $expiry >= $asked + 119, "$scheme: expiry $expiry after prolongate by 120 s at $asked");
        expect_exception(LockTimeoutException::class, fn () => $other->getLock('job', 0, 30), "$scheme: after prolongate");

        // A shorter time is kept too: the lock runs out by it.
        $holder->prolongate('job', 0.05);
        wait_past_expiry($holder, $scheme, 'job');
        if ($scheme === 'flock') {
            expect_exception(LockExpiredException::class, fn () => $holder->releaseLock('job'), "$scheme: past the shorter time");
        } else {
            $other->getLock('job', 0, 30);
            expect_exception(LockLostException::class, fn () => $holder->releaseLock('job'), "$scheme: past the shorter time");
        }
    }
}

function test_give_up_early_waits_only_for_a_holder_that_runs_out_in_time(string $dir): void
{
    foreach (SCHEMES as $scheme) {
        [$holder, $waiter] = two_objects($scheme, "$dir/$scheme");
        foreach ([60, 0] as $maxExecuteTime) {
            $holder->getLock('job', 0, $maxExecuteTime);
            $asked = microtime(true);
            $e = expect_exception(
                LockTimeoutException::class,
                fn () => $waiter->getLock('job', 20, 30, Locks::POLICY_GIVE_UP_EARLY),
                "$scheme, held for $maxExecuteTime s"
            );
            check(microtime(true) - $asked < 20, "$scheme: waited the whole wait before giving up");
            check(str_contains($e->getMessage(), 'held by pid ' . getmypid()), "$scheme: message without the holder: {$e->getMessage()}");
            check(str_contains($e->getMessage(), 'POLICY_GIVE_UP_EARLY'), "$scheme: message without the policy: {$e->getMessage()}");
            $holder->releaseLock('job');
        }
        // A flock lock does not come free when its holder's time runs out.
        if ($scheme !== 'flock') {
            $holder->getLock('job', 0, 0.2);
            $waiter->getLock('job', 20, 30, Locks::POLICY_GIVE_UP_EARLY);
            check($waiter->holds('job'), "$scheme: not taken after the holder ran out");
            expect_exception(LockLostException::class, fn () => $holder->releaseLock('job'), "$scheme: the overrun holder");
        }
    }
}

function test_destruction_releases(string $dir): void
{
    foreach (SCHEMES as $scheme) {
        [$holder, $next] = two_objects($scheme, "$dir/$scheme");
        $holder->getLock('job', 0, 30);
        $holder->getLock('other', 0, 30);
        $holder = null;
        $next->getLock('job', 0, 30);
        $next->getLock('other', 0, 30);
        check($next->holds('job') && $next->holds('other'), "$scheme: not taken after the holder was destroyed");
    }
}

/**
 * After a fatal error PHP calls no destructor; the lock must be released all
 * the same before the request ends, since a persistent worker (php-fpm) goes
 * on to its next request instead of exiting.
 */
function test_a_fatal_error_releases(string $dir): void
{
    foreach (SCHEMES as $scheme) {
        mkdir("$dir/$scheme", 0700);
        $script = 'require ' . var_export(realpath(__DIR__ . '/../autoload.php'), true) . ';'
            . '$locks = Lockffi\\Locks::inDirectory($argv[1], $argv[2]);'
            . '$probe = Lockffi\\Locks::inDirectory($argv[1], $argv[2]);'
            . '$locks->getLock("job", 0, 30);'
            . 'register_shutdown_function(function () use ($probe) { echo $probe->inspect("job")["held"] ? "held" : "free"; });'
            . 'ini_set("memory_limit", "16M"); $waste = str_repeat("x", 64 << 20);';
        [$status, $output] = run_php(['-r', $script, $scheme, "$dir/$scheme"]);
        check($status === 255 && str_contains($output, 'Allowed memory size'), "$scheme: no fatal error: $status: $output");
        check(str_ends_with($output, 'free'), "$scheme: the lock after the fatal error: $output");
    }
}

function test_keys_map_to_paths_of_every_scheme(string $dir): void
{
    foreach (SCHEMES as $scheme) {
        mkdir("$dir/$scheme", 0700);
        $locks = Locks::inDirectory($scheme, "$dir/$scheme");
        $expected = $scheme === 'lockfile' ? "$dir/$scheme/a key?&%.lock" : "$dir/$scheme/a key?&%";
        check($locks->path('a key?&%') === $expected, "$scheme: path {$locks->path('a key?&%')}, not $expected");
        $locks->getLock('a key?&%', 0, 30);
        check(is_link($expected) || file_exists($expected), "$scheme: nothing at $expected while held");
        $locks->releaseLock('a key?&%');
    }
    $template = new Locks("lease:$dir/lease/{key}.lease?mode=0600");
    check($template->path('job') === "$dir/lease/job.lease", "template path {$template->path('job')}");
}

function test_misuse_and_errors_carry_the_code_and_the_cause(string $dir): void
{
    $locks = Locks::inDirectory('lease', $dir);
    $e = expect_exception(LockException::class, fn () => $locks->releaseLock('job'), 'release of a lock not held');
    check($e->getCode() === 101, "release not held: code {$e->getCode()}");
    expect_exception(LockException::class, fn () => $locks->prolongate('job', 1), 'prolongate of a lock not held');
    expect_exception(LockException::class, fn () => $locks->fence('job'), 'fence of a lock not held');
    $locks->getLock('job', 0, 30);
    $e = expect_exception(LockException::class, fn () => $locks->getLock('job', 0, 30), 'getLock twice');
    check($e->getCode() === 102, "getLock twice: code {$e->getCode()}");

    $missing = Locks::inDirectory('lease', "$dir/missing");
    $e = expect_exception(LockException::class, fn () => $missing->getLock('job'), 'a missing directory');
    check($e->getCode() === 300, "a missing directory: code {$e->getCode()}");
    check(str_contains($e->getMessage(), "$dir/missing"), "a missing directory: message without the path: {$e->getMessage()}");

    $e = expect_exception(LockException::class, fn () => (new Locks("lease:$dir/{key}?colour=red"))->getLock('job'), 'an unknown option');
    check($e->getCode() === 202 && str_contains($e->getMessage(), 'colour'), "an unknown option: {$e->getCode()} {$e->getMessage()}");

    // The schemes these tests run are every one the library has.
    $e = expect_exception(LockException::class, fn () => (new Locks("nosuch:$dir/{key}"))->getLock('job'), 'an unknown scheme');
    $listed = preg_match('/this build has ([a-z]+(?:, [a-z]+)*)/', $e->getMessage(), $found) === 1 ? $found[1] : '';
    $expected = implode(', ', [...SCHEMES, ...SERVER_SCHEMES]);
    check($listed === $expected, "the library's schemes are \"$listed\", the tests run \"$expected\": {$e->getMessage()}");

    foreach (['', '.', '..', 'a/b', "a\0b"] as $key) {
        expect_exception(\InvalidArgumentException::class, fn () => $locks->getLock($key), 'key ' . json_encode($key));
    }
    expect_exception(\InvalidArgumentException::class, fn () => $locks->getLock('x', -1), 'a negative wait');
    expect_exception(\InvalidArgumentException::class, fn () => new Locks("lease:$dir/{key}?ttl=1s"), 'a template with a ttl');
    expect_exception(\InvalidArgumentException::class, fn () => new Locks("lease:$dir/job"), 'a template without {key}');
    check(is_subclass_of(LockBusyException::class, LockException::class), 'LockBusyException is a LockException');
}

function test_processes_contend_with_an_exact_count(string $dir): void
{
    $processes = 3;
    $rounds = 25;
    foreach (SCHEMES as $scheme) {
        mkdir("$dir/$scheme", 0700);
        $children = [];
        foreach (range(1, $processes) as $ignored) {
            $children[] = start_php([__DIR__ . '/contender.php', $scheme, "$dir/$scheme", (string) $rounds]);
        }
        foreach ($children as $child) {
            [$status, $output] = finish_php($child);
            check($status === 0, "$scheme: a contender exited with $status:\n$output");
        }
        $count = (int) file_get_contents("$dir/$scheme/count");
        check($count === $processes * $rounds, "$scheme: count $count, not " . $processes * $rounds);
        $fences = array_map('intval', file("$dir/$scheme/fences", FILE_IGNORE_NEW_LINES));
        check(count($fences) === $processes * $rounds, "$scheme: " . count($fences) . ' fences logged');
        foreach (array_slice($fences, 1) as $i => $fence) {
            check($fence > $fences[$i], "$scheme: fence $fence logged after {$fences[$i]}");
        }
    }
}

function test_a_forked_child_leaves_the_parents_lock(string $dir): void
{
    if (!function_exists('pcntl_fork')) {
        throw new TestSkipped('no pcntl extension');
    }
    foreach (SCHEMES as $scheme) {
        [$parent, $other] = two_objects($scheme, "$dir/$scheme");
        $fence = $parent->getLock('job', 0, 30);
        $child = pcntl_fork();
        check($child !== -1, 'pcntl_fork failed');
        if ($child === 0) {
            // The child's exit destroys its copy of $parent, which must leave the lock alone.
            try {
                $parent->releaseLock('job');
            } catch (LockException $e) {
                exit($e->getCode() === 103 ? 0 : 1);
            }
            exit(2);
        }
        check(pcntl_waitpid($child, $status) === $child, "$scheme: waitpid");
        check(pcntl_wifexited($status) && pcntl_wexitstatus($status) === 0, "$scheme: the child's release did not answer LOCK_ERR_FORKED: status $status");
        $state = $parent->inspect('job');
        check($state['heldByThis'] && $state['fence'] === $fence, "$scheme: the parent's lock after the child exited: " . json_encode($state));
        expect_exception(LockTimeoutException::class, fn () => $other->getLock('job', 0, 30), "$scheme: after the child exited");
        $parent->releaseLock('job');
    }
}

/** The header that FFI::load and ffi.preload read, with liblockffi.so.0 found on the loader path. */
function test_preload_header(string $dir): void
{
    symlink(library_path(), "$dir/liblockffi.so.0");
    $header = realpath(__DIR__ . '/../lockffi.h');
    $environment = ['LD_LIBRARY_PATH' => $dir, 'LOCK_DIR' => $dir];

    $loaded = run_php(['-r', 'echo FFI::load(' . var_export($header, true) . ')->lock_version();'], $environment);
    check($loaded[0] === 0 && preg_match('/^\d+\.\d+\.\d+$/', $loaded[1]) === 1, "FFI::load: {$loaded[0]}: {$loaded[1]}");

    // The class must take the preloaded scope: the library LOCKFFI_LIBRARY
    // names does not exist.
    $use = 'require ' . var_export(realpath(__DIR__ . '/../autoload.php'), true) . ';'
        . '$locks = Lockffi\Locks::inDirectory("lease", getenv("LOCK_DIR"));'
        . 'echo $locks->getLock("job", 0, 30) > 0 ? "held" : "no fence"; $locks->releaseLock("job");';
    $preloaded = run_php(['-d', "ffi.preload=$header", '-r', $use], $environment + ['LOCKFFI_LIBRARY' => "$dir/absent.so"]);
    check($preloaded === [0, 'held'], 'ffi.preload: ' . json_encode($preloaded));

    $missing = run_php(['-r', $use], $environment + ['LOCKFFI_LIBRARY' => "$dir/absent.so"]);
    check($missing[0] !== 0 && str_contains($missing[1], "$dir/absent.so"), 'without preload, a missing LOCKFFI_LIBRARY: ' . json_encode($missing));

    $default = run_php(['-r', $use], $environment + ['LOCKFFI_LIBRARY' => '']);
    check($default === [0, 'held'], 'without LOCKFFI_LIBRARY, liblockffi.so.0: ' . json_encode($default));
}

exit(run_tests(array_filter(get_defined_functions()['user'], fn (string $name) => str_starts_with($name, 'test_'))));
