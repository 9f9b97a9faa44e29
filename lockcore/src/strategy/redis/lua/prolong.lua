-- Moves the expiry of a held lock.
-- KEYS: lock, fence. ARGV: the start of the holder's record up to its
-- fence, its fence, the record with its new expiry, the new ttl in ms
-- (0: none).
-- Returns {'prolonged', the record as it was}, 'expired' (the key had
-- expired and nobody took the lock: it is held again) or 'lost'.
local lock, fence_key = KEYS[1], KEYS[2]
local identity, fence, renewed, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local current = redis.call('GET', lock)
local outcome = {'prolonged', current}
if not current or string.sub(current, 1, #identity) ~= identity then
  if current then
    return 'lost'
  end
  local last = last_fence(fence_key)
  if last and last > tonumber(fence) then
    return 'lost'
  end
  outcome = 'expired'
end
if ttl > 0 then
  redis.call('SET', lock, renewed, 'PX', ttl)
else
  redis.call('SET', lock, renewed)
end
return outcome
