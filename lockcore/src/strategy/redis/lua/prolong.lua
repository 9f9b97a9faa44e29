-- Moves the expiry of a held lock.
-- KEYS: lock, fence, the last holder's record for the next taker.
-- ARGV: the start of the holder's record up to its fence, its fence, the
-- record with its new expiry, the new ttl in ms (0: none), and the time
-- (server ms, 0: none) after which the caller no longer waits for this
-- answer.
-- Returns {'prolonged', the record as it was}, 'expired' (the key had
-- expired and nobody took the lock: it is held again), 'lost', 'late' (it
-- came after its caller gave up: a lock that ran out meanwhile is not
-- brought back) or 'foreign'.
local lock, fence_key, last_taken = KEYS[1], KEYS[2], KEYS[3]
local identity, fence, renewed, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if too_late(tonumber(ARGV[5]), server_time()) then
  return 'late'
end
if not types_fit({[lock] = 'string', [fence_key] = 'string'}) then
  return 'foreign'
end
local fate, current = fate_of(lock, fence_key, identity, fence)
if fate == 'lost' then
  return 'lost'
end
-- The record kept for the next taker follows (a value this library never
-- writes there is left alone; a prolong is never refused for it).
local kept = last_taken_at(last_taken)
if ttl > 0 then
  redis.call('SET', lock, renewed, 'PX', ttl)
  if kept ~= false then
    redis.call('SET', last_taken, fence .. '\n' .. renewed)
  end
else
  redis.call('SET', lock, renewed)
  if kept then
    redis.call('DEL', last_taken)
  end
end
if fate == 'ours' then
  return {'prolonged', current}
end
return 'expired'
