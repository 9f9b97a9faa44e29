-- Gives the lock back, and wakes the first waiter.
-- KEYS: lock, fence, queue, the last holder's record for the next taker,
-- the last release's record.
-- ARGV: the start of the holder's record up to its fence (owner, nonce,
-- fence: what a watchdog's renewal leaves as it was), its fence, a
-- cooldown in ms (0: none), the wake lists' prefix, a waiter's lease in
-- ms.
-- Returns {'released', the record as it was} (still ours: the record's
-- expiry, perhaps moved by a watchdog, tells whether the holder overran
-- its own lease), 'expired' (its key had expired and nobody took the lock
-- since), 'released' (asked again: it was given back, and no release came
-- since), 'lost' (someone else took it), or 'foreign' (a key holds what
-- this library never writes; nothing was changed).
local lock, fence_key, queue, last_taken, released = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local identity, fence, cooldown, wake_prefix, lease = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
if not types_fit({[lock] = 'string', [fence_key] = 'string', [queue] = 'list'}) then
  return 'foreign'
end
-- Asked again, its first answer lost: that one gave the lock back.
local remembered_at, remembered = released_at(released)
if remembered_at == fence and string.sub(remembered, 1, #identity) == identity then
  return 'released'
end
local fate, current = fate_of(lock, fence_key, identity, fence)
if fate == 'lost' then
  return 'lost'
end
-- Given back: nobody is to be told they took it over, and a release asked
-- again is told it was. (A value this library never writes in either key
-- is left alone; a release is never refused for it.)
if last_taken_at(last_taken) then
  redis.call('DEL', last_taken)
end
if fate == 'ours' and remembered_at ~= false then
  redis.call('SET', released, fence .. '\n' .. current, 'PX', RELEASE_REMEMBERED_MS)
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
