<?php

declare(strict_types=1);

namespace Lockffi;

/**
 * The loaded liblockffi, shared by every Locks object of the process.
 *
 * A scope preloaded from lockffi.h (ffi.preload, or FFI::load in an
 * opcache.preload script) is used when there is one: under php-fpm's default
 * ffi.enable=preload it is the only way in. Otherwise the declarations of
 * lockffi.h are given to FFI::cdef with the library named by LOCKFFI_LIBRARY,
 * or liblockffi.so.0, the name `make install` puts on the loader's path.
 *
 * @internal
 */
final class Library
{
    public const SCOPE = 'lockffi';
    public const VARIABLE = 'LOCKFFI_LIBRARY';
    public const DEFAULT_NAME = 'liblockffi.so.0';

    private static ?\FFI $ffi = null;

    public static function ffi(): \FFI
    {
        return self::$ffi ??= self::load();
    }

    private static function load(): \FFI
    {
        try {
            return \FFI::scope(self::SCOPE);
        } catch (\FFI\Exception) {
            // Not preloaded: declare it here.
        }
        $library = getenv(self::VARIABLE);
        if ($library === false || $library === '') {
            $library = self::DEFAULT_NAME;
        }
        try {
            return \FFI::cdef(self::declarations(), $library);
        } catch (\FFI\Exception $e) {
            throw new \RuntimeException(
                sprintf(
                    "cannot load the lock library '%s' (from %s): %s",
                    $library,
                    $library === self::DEFAULT_NAME ? 'the loader path; set ' . self::VARIABLE . ' to its path' : self::VARIABLE,
                    $e->getMessage()
                ),
                0,
                $e
            );
        }
    }

    /** lockffi.h without the two #define lines that only FFI::load understands. */
    private static function declarations(): string
    {
        $header = __DIR__ . '/../lockffi.h';
        $text = file_get_contents($header);
        if ($text === false) {
            throw new \RuntimeException("cannot read the lock library's declarations from $header");
        }
        return preg_replace('/^#define FFI_\w+ .*$/m', '', $text);
    }
}
