<?php

// One of the processes of test_processes_contend_with_an_exact_count:
//
//     php contender.php SCHEME DIRECTORY ROUNDS
//
// takes the lock 'turn' ROUNDS times; each time it marks that it is inside
// (the mark must not exist: another holder's would mean two at once), adds
// one to DIRECTORY/count by reading and rewriting it (two holders at once
// lose an update), logs its fence, and removes its mark.

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

set_error_handler(static function (int $severity, string $message, string $file, int $line): never {
    throw new ErrorException($message, 0, $severity, $file, $line);
});

[, $scheme, $dir, $rounds] = $argv;
$locks = Lockffi\Locks::inDirectory($scheme, $dir);
for ($round = 0; $round < (int) $rounds; $round++) {
    $fence = $locks->getLock('turn', INF, 30);
    try {
        $inside = fopen("$dir/inside", 'x');
    } catch (ErrorException) {
        fwrite(STDERR, "$scheme: pid " . getmypid() . " holds fence $fence while another holder is inside\n");
        exit(2);
    }
    $count = is_file("$dir/count") ? (int) file_get_contents("$dir/count") : 0;
    usleep(500); // widens the window in which a second holder would show
    file_put_contents("$dir/count", (string) ($count + 1));
    file_put_contents("$dir/fences", "$fence\n", FILE_APPEND);
    fclose($inside);
    unlink("$dir/inside");
    $locks->releaseLock('turn');
}
