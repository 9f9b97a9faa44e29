-- Gives the lock back, and wakes the first waiter.
-- KEYS: lock, fence, queue, the last holder's record for the next taker.
-- ARGV: the start of the holder's record up to its fence (owner, nonce,
-- fence: what a watchdog's renewal leaves as it was), its fence, a
-- cooldown in ms (0: none), the wake lists' prefix, a waiter's lease in
-- ms.
-- Returns {'released', the record as it was} (still ours: the record's
-- expiry, perhaps moved by a watchdog, tells whether the holder overran
-- its own lease), 'expired' (its key had expired and nobody took the lock
-- since), 'lost' (someone else took it), or 'foreign' (a key holds what
-- this library never writes; nothing was changed).
local lock, fence_key, queue, last_taken = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local identity, fence, cooldown, wake_prefix, lease = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
if not types_fit({[lock] = 'string', [fence_key] = 'string', [queue] = 'list'}) then
  return 'foreign'
end
local fate, current = fate_of(lock, fence_key, identity, fence)
if fate == 'lost' then
  return 'lost'
end
-- Given back: nobody is to be told they took it over. (A value this
-- library never writes there is left alone; a release is never refused
-- for it.)
if last_taken_at(last_taken) then
  redis.call('DEL', last_taken)
end
if cooldown > 0 then
  redis.call('SET', lock, COOLDOWN, 'PX', cooldown)
else
  redis.call('DEL', lock)
  wake_head(queue, wake_prefix, lease)
end
if fate == 'ours' then
  return {'released', current}
end
return 'expired'
