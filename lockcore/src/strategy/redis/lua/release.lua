-- Gives the lock back, and wakes the first waiter.
-- KEYS: lock, fence, queue, the last holder's record for the next taker.
-- ARGV: the start of the holder's record up to its fence (owner, nonce,
-- fence: what a watchdog's renewal leaves as it was), its fence, a
-- cooldown in ms (0: none), the wake lists' prefix, a waiter's lease in
-- ms.
-- Returns {'released', the record as it was} (still ours: the record's
-- expiry, perhaps moved by a watchdog, tells whether the holder overran
-- its own lease), 'expired' (its key had expired and nobody took the lock
-- since), 'released' (asked again: it was given back, and nobody took it
-- since), 'lost' (someone else took it), or 'foreign' (a key holds what
-- this library never writes; nothing was changed).
local lock, fence_key, queue, last_taken = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local identity, fence, cooldown, wake_prefix, lease = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
if not types_fit({[lock] = 'string', [fence_key] = 'string', [queue] = 'list'}) then
  return 'foreign'
end
-- Asked again, its first answer lost: that one gave the lock back.
local kept_at, kept, ended = last_taken_at(last_taken)
if ended == 'released' and kept_at == fence and string.sub(kept, 1, #identity) == identity then
  return 'released'
end
local fate, current = fate_of(lock, fence_key, identity, fence)
if fate == 'lost' then
  return 'lost'
end
-- Given back: nobody is to be told they took it over, and a release asked
-- again is told it was. (A value this library never writes there is left
-- alone; a release is never refused for it.)
if kept_at ~= false then
  if fate == 'ours' then
    redis.call('SET', last_taken, fence .. ' released\n' .. current, 'PX', RELEASE_REMEMBERED_MS)
  elseif kept_at then
    redis.call('DEL', last_taken)
  end
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
