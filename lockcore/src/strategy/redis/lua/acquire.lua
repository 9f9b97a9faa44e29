-- One attempt at the lock.
-- KEYS: lock, fence, queue, alive (waiter -> lease end, ms), own wake list,
-- the last holder's record, for the next taker.
-- ARGV: record before its fence, record after it, ttl ms (0: none), this
-- waiter's id, how to wait (fair | barge | try-fair | try), a waiter's
-- lease in ms, a stale record to break (or ''), the wake lists' prefix,
-- and the time (server ms, 0: none) after which the caller no longer waits
-- for this answer.
-- Returns {'taken', fence, the record of the holder it took over from or '',
-- 'dead' or 'expired' or ''} or {'busy', holder record or '', pttl, waiters
-- ahead} or {'late'} for a request that came after its caller gave up
-- (held up in a stopped server), or {'foreign'} / {'fence'} for keys that
-- hold what no acquisition wrote.
local lock, fence_key, queue, alive, own_wake, last_taken = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local before, after, ttl, me, how = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local lease, stale, wake_prefix = tonumber(ARGV[6]), ARGV[7], ARGV[8]
local now_ms, now_us = server_time()
if too_late(tonumber(ARGV[9]), now_ms) then
  return {'late'}
end
if not types_fit({[lock] = 'string', [fence_key] = 'string', [queue] = 'list', [alive] = 'zset'}) then
  return {'foreign'}
end

-- Waiters whose lease ran out (dead, or gone without a word) leave the
-- line; a few at a time, so that no script runs long over a queue that
-- someone filled with dead entries.
local head = redis.call('LINDEX', queue, 0)
for _ = 1, 1000 do
  if not head then break end
  local until_ms = redis.call('ZSCORE', alive, head)
  if until_ms and tonumber(until_ms) > now_ms then break end
  redis.call('LPOP', queue)
  redis.call('ZREM', alive, head)
  head = redis.call('LINDEX', queue, 0)
end

local current = redis.call('GET', lock)
if current and not ours(current) then
  return {'foreign'}
end
-- The last holder's record, kept for the next taker: of a holder broken
-- as dead, or of the last acquisition with a ttl, until it is given back.
-- Read only where it is written or told.
local left
local function read_left()
  left = {last_taken_at(last_taken)}
  return left[1] ~= false
end
-- A dead holder broken here is told to whoever takes the lock next (in a
-- fair line, often another waiter), with the fence it held.
if current and stale ~= '' and current == stale then
  if not read_left() then
    return {'foreign'}
  end
  redis.call('DEL', lock)
  left = {redis.call('GET', fence_key) or '0', current, 'dead'}
  redis.call('SET', last_taken, left[1] .. ' dead\n' .. current)
  current = false
end

local fair = how == 'fair' or how == 'try-fair'
if not current and (not fair or not head or head == me) then
  local last_fence_now = last_fence(fence_key)
  if not last_fence_now then
    return {'fence'}
  end
  if not (left or read_left()) then
    return {'foreign'}
  end
  -- Told only if nothing took the lock since that holder, and it did not
  -- give it back: a taker that runs no script of ours would have moved the
  -- fence on without reading its record.
  local at, took_over, how_ended = left[1], left[2] or '', left[3] or ''
  if not at or tonumber(at) ~= last_fence_now or how_ended == 'released' then
    took_over, how_ended = '', ''
  end
  local fence = next_fence(last_fence_now, now_us)
  local record = before .. fence .. after
  redis.call('SET', fence_key, fence)
  if ttl > 0 then
    redis.call('SET', lock, record, 'PX', ttl)
    -- Kept past the key's expiry, for the next taker to tell; gone with
    -- the release.
    redis.call('SET', last_taken, fence .. '\n' .. record)
  else
    -- Without a ttl nothing expires: nothing is kept.
    redis.call('SET', lock, record)
    if at then
      redis.call('DEL', last_taken)
    end
  end
  -- A waiter that had a place gives it up; one that had none has no
  -- wake list either (or one that runs out with its lease).
  if redis.call('ZREM', alive, me) == 1 then
    redis.call('LREM', queue, 1, me)
    redis.call('DEL', own_wake)
  end
  return {'taken', fence, took_over, how_ended}
end

if how == 'fair' or how == 'barge' then
  if not redis.call('ZSCORE', alive, me) then
    redis.call('RPUSH', queue, me)
  end
  redis.call('ZADD', alive, now_ms + lease, me)
  redis.call('PEXPIRE', queue, 4 * lease)
  redis.call('PEXPIRE', alive, 4 * lease)
end
if not current then
  -- Free, and another's turn: that one may have missed its wake (it was
  -- put at the head by a purge just now).
  wake_head(queue, wake_prefix, lease)
end
local ahead = redis.call('LPOS', queue, me) or redis.call('LLEN', queue)
return {'busy', current or '', redis.call('PTTL', lock), ahead}
