<?php

// For use without Composer: require this file, then use the Lockffi classes.
// With Composer the package's PSR-4 autoload does the same.

declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    $prefix = 'Lockffi\\';
    if (strncmp($class, $prefix, strlen($prefix)) === 0) {
        $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
