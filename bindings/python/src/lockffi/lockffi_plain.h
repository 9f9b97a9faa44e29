/* lockffi_plain.h: the declarations of lockffi.h without preprocessor lines, for FFI tools.
 * Generated from lockffi/src; do not edit. Documentation: lockffi.h. */

typedef enum {
  LOCK_OK = 0,
  LOCK_EXPIRED = 1,
  LOCK_LOST = 2,
  LOCK_BUSY = 3,
  LOCK_TIMEOUT = 4,
  LOCK_CANCELLED = 5,
  LOCK_ERR_NULL_ARGUMENT = 100,
  LOCK_ERR_NOT_HELD = 101,
  LOCK_ERR_ALREADY_HELD = 102,
  LOCK_ERR_FORKED = 103,
  LOCK_ERR_HANDLE_IN_USE = 104,
  LOCK_ERR_UNSUPPORTED = 105,
  LOCK_ERR_BUFFER_TOO_SMALL = 106,
  LOCK_ERR_INVALID_ARGUMENT = 107,
  LOCK_ERR_SPEC_SYNTAX = 200,
  LOCK_ERR_SPEC_UNKNOWN_SCHEME = 201,
  LOCK_ERR_SPEC_UNKNOWN_KEY = 202,
  LOCK_ERR_SPEC_BAD_VALUE = 203,
  LOCK_ERR_SPEC_DUPLICATE_KEY = 204,
  LOCK_ERR_PATH_TOO_LONG = 205,
  LOCK_ERR_SPEC_BAD_URL = 206,
  LOCK_ERR_NOT_FOUND = 300,
  LOCK_ERR_PERMISSION = 301,
  LOCK_ERR_SYMLINK = 302,
  LOCK_ERR_NOT_A_LOCK = 303,
  LOCK_ERR_CORRUPT_RECORD = 304,
  LOCK_ERR_RECORD_TOO_LONG = 305,
  LOCK_ERR_CORRUPT_GUARD = 306,
  LOCK_ERR_SYSTEM = 307,
  LOCK_ERR_COMMIT = 308,
  LOCK_ERR_NOT_A_DIRECTORY = 309,
  LOCK_ERR_UNTRUSTED = 310,
  LOCK_ERR_SERVER_UNKNOWN_HOST = 400,
  LOCK_ERR_SERVER_UNREACHABLE = 401,
  LOCK_ERR_SERVER_NO_ANSWER = 402,
  LOCK_ERR_SERVER_DISCONNECTED = 403,
  LOCK_ERR_SERVER_AUTH = 404,
  LOCK_ERR_SERVER_NOT_READY = 405,
  LOCK_ERR_SERVER_READ_ONLY = 406,
  LOCK_ERR_SERVER_NO_WRITES = 407,
  LOCK_ERR_SERVER_REFUSED = 408,
  LOCK_ERR_SERVER_FOREIGN_KEYS = 409,
  LOCK_ERR_SERVER_PROTOCOL = 410,
  LOCK_ERR_SERVER_NOT_REPLICATED = 411,
  LOCK_ERR_PANIC = 900
} lock_result;

typedef enum {
  LOCK_OWNER_UNKNOWN = 0,
  LOCK_OWNER_ALIVE = 1,
  LOCK_OWNER_DEAD = 2
} lock_liveness;

typedef struct lock_handle lock_handle;

typedef struct {
  bool held;
  bool held_by_this_handle;
  bool stale;
  lock_liveness owner_liveness;
  int32_t owner_pid;
  char owner_host[65];
  uint64_t fence;
  uint64_t last_fence;
  int64_t expires_unix_ms;
  int64_t cooldown_until_unix_ms;
  uint32_t queue_length;
  int64_t since_unix_ms;
} lock_info;

typedef void (*lock_lost_fn)(void *context);

typedef void (*lock_warning_fn)(void *context, uint64_t waited_ms);

typedef bool (*lock_cancel_fn)(void *context);

const char *lock_version(void);

const char *lock_strerror(int32_t code);

size_t lock_last_error_message(char *buf, size_t buf_len);

lock_result lock_open(const char *spec, lock_handle **handle_out);

lock_result lock_close(lock_handle *handle);

lock_result lock_try_acquire(lock_handle *handle, uint64_t *fence_out);

lock_result lock_acquire(lock_handle *handle, uint64_t timeout_ms, uint64_t *fence_out);

lock_result lock_release(lock_handle *handle, uint64_t cooldown_ms);

lock_result lock_prolong(lock_handle *handle, uint64_t ttl_ms);

lock_result lock_took_over(lock_handle *handle, lock_info *previous_out);

lock_result lock_commit(lock_handle *handle, const char *temp_path, const char *target_path);

lock_result lock_autorenew(lock_handle *handle, lock_lost_fn lost, void *context);

lock_result lock_autorenew_stop(lock_handle *handle);

lock_result lock_inspect(lock_handle *handle, lock_info *info_out);

lock_result lock_break(lock_handle *handle, bool *was_held_out);

lock_result lock_set_warning(lock_handle *handle, lock_warning_fn callback, void *context);

lock_result lock_set_cancel(lock_handle *handle, lock_cancel_fn callback, void *context);

lock_result lock_path(lock_handle *handle, char *buf, size_t buf_len, size_t *len_out);
