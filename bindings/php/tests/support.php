<?php

// What the tests share: the list of schemes, checks, waiting, child PHP
// processes, and the runner.

declare(strict_types=1);

use Lockffi\Locks;

/**
 * Every scheme of the library whose locks are files (lockcore's Scheme::ALL
 * but those on a server, which the library's own suites test), checked
 * against the list the library gives when it refuses a scheme it does not
 * know (test_misuse_and_errors_carry_the_code_and_the_cause).
 */
const SCHEMES = ['lockfile', 'mkdir', 'flock', 'symlink', 'lease', 'toplock', 'shm'];
/** The schemes whose locks are on a server. */
const SERVER_SCHEMES = ['redis'];

// A warning or notice is a failure, in the tests as in the code they test.
set_error_handler(static function (int $severity, string $message, string $file, int $line): never {
    throw new ErrorException($message, 0, $severity, $file, $line);
});

final class TestFailure extends \Exception
{
}

/** Thrown by a test that cannot run here, with the reason. */
final class TestSkipped extends \Exception
{
}

function check(bool $condition, string $what): void
{
    if (!$condition) {
        throw new TestFailure($what);
    }
}

/**
 * Runs `$call`, which must throw exactly `$class` (not a subclass: the
 * outcomes must be told apart), and returns what it threw.
 */
function expect_exception(string $class, callable $call, string $what): \Throwable
{
    try {
        $call();
    } catch (\Throwable $e) {
        check(get_class($e) === $class, "$what: expected $class, got " . get_class($e) . ': ' . $e->getMessage());
        return $e;
    }
    throw new TestFailure("$what: expected $class, nothing was thrown");
}

/** Waits for `$condition`, checking it every 10 ms, for at most 30 s. */
function wait_until(callable $condition, string $what): void
{
    $deadline = microtime(true) + 30;
    while (!$condition()) {
        check(microtime(true) < $deadline, "gave up after 30 s waiting for $what");
        usleep(10_000);
    }
}

/**
 * Waits until the held lock of `$key` has run out: until an acquirer would
 * break it, or, for flock, which is never broken, until its expiry is past.
 */
function wait_past_expiry(Locks $locks, string $scheme, string $key): void
{
    $expiresAt = $locks->inspect($key)['expiresAt'];
    check($expiresAt !== null, "$scheme: the lock of $key has no expiry");
    if ($scheme === 'flock') {
        wait_until(fn () => microtime(true) > $expiresAt, "$scheme: the lock of $key to expire");
    } else {
        wait_until(fn () => $locks->inspect($key)['stale'], "$scheme: the lock of $key to go stale");
    }
}

/** @return array{Locks, Locks} two objects for the locks of `$scheme` in the new directory `$dir` */
function two_objects(string $scheme, string $dir): array
{
    mkdir($dir, 0700);
    return [Locks::inDirectory($scheme, $dir), Locks::inDirectory($scheme, $dir)];
}

function library_path(): string
{
    $library = getenv('LOCKFFI_LIBRARY');
    check($library !== false && is_file($library), 'LOCKFFI_LIBRARY names no library: ' . var_export($library, true));
    return $library;
}

/**
 * Starts this PHP binary with `$arguments`, its stderr joined to its stdout.
 *
 * @param array<string, string> $environment added to this process's
 * @return array{resource, resource} the process and its output
 */
function start_php(array $arguments, array $environment = []): array
{
    $process = proc_open(
        array_merge([PHP_BINARY], $arguments),
        [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['redirect', 1]],
        $pipes,
        null,
        array_merge(getenv(), $environment)
    );
    check(is_resource($process), 'cannot start ' . PHP_BINARY);
    return [$process, $pipes[1]];
}

/** @return array{int, string} the exit status and the output of a process from start_php */
function finish_php(array $child): array
{
    [$process, $output] = $child;
    $text = stream_get_contents($output);
    fclose($output);
    return [proc_close($process), trim($text)];
}

/** @return array{int, string} */
function run_php(array $arguments, array $environment = []): array
{
    return finish_php(start_php($arguments, $environment));
}

function fresh_directory(): string
{
    do {
        $dir = sys_get_temp_dir() . '/lockffi-php-' . bin2hex(random_bytes(8));
    } while (!try_mkdir($dir));
    return $dir;
}

/** Whether `$dir` was made now (false if something was there already). */
function try_mkdir(string $dir): bool
{
    try {
        return mkdir($dir, 0700);
    } catch (ErrorException $e) {
        check(file_exists($dir), "cannot make $dir: {$e->getMessage()}");
        return false;
    }
}

function remove_tree(string $path): void
{
    if (is_dir($path) && !is_link($path)) {
        foreach (scandir($path) as $name) {
            if ($name !== '.' && $name !== '..') {
                remove_tree("$path/$name");
            }
        }
        rmdir($path);
    } else {
        unlink($path);
    }
}

/**
 * Runs each test in a fresh directory and prints PASS or FAIL for it.
 *
 * @param list<string> $tests the names of the test functions
 * @return int the exit status: 1 if a test failed
 */
function run_tests(array $tests): int
{
    $failed = 0;
    foreach ($tests as $test) {
        $dir = fresh_directory();
        $started = microtime(true);
        try {
            $test($dir);
            printf("PASS %s (%.2f s)\n", $test, microtime(true) - $started);
        } catch (TestSkipped $e) {
            printf("SKIP %s: %s\n", $test, $e->getMessage());
        } catch (\Throwable $e) {
            $failed++;
            $where = $e instanceof TestFailure ? '' : sprintf(' (%s at %s:%d)', get_class($e), $e->getFile(), $e->getLine());
            printf("FAIL %s: %s%s\n", $test, $e->getMessage(), $where);
        } finally {
            gc_collect_cycles();
            remove_tree($dir);
        }
    }
    printf("%d failed of %d\n", $failed, count($tests));
    return $failed === 0 ? 0 : 1;
}
