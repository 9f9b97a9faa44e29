-- Takes back an acquisition whose answer never came (the server ran it,
-- but the answer was late or lost): the lock, if it holds that
-- acquisition, and the waiter's place in line.
-- KEYS: lock, queue, alive, the waiter's wake list, the last holder's
-- record for the next taker. ARGV: the start of the acquisition's record
-- up to its fence (owner and nonce, which no other acquisition has), the
-- waiter's id, the wake lists' prefix, a waiter's lease in ms.
local lock, queue, alive, own_wake, last_taken = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if not types_fit({[lock] = 'string', [queue] = 'list', [alive] = 'zset'}) then
  return 'foreign'
end
local current = redis.call('GET', lock)
local withdrawn = 0
if current and string.sub(current, 1, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', lock)
  withdrawn = 1
end
-- Taken back, whether or not its key is still there: nobody took it over.
local _, taken = last_taken_at(last_taken)
if taken and string.sub(taken, 1, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', last_taken)
end
leave_line(lock, queue, alive, own_wake, ARGV[2], ARGV[3], tonumber(ARGV[4]))
return withdrawn
