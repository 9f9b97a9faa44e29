-- Gives up a waiter's place in line.
-- KEYS: lock, queue, alive, the waiter's wake list. ARGV: its id, the wake
-- lists' prefix, a waiter's lease in ms.
local lock, queue, alive, own_wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if not types_fit({[lock] = 'string', [queue] = 'list', [alive] = 'zset'}) then
  return 'foreign'
end
leave_line(lock, queue, alive, own_wake, ARGV[1], ARGV[2], tonumber(ARGV[3]))
return 1
