-- One attempt at the lock.
-- KEYS: lock, fence, queue, alive (waiter -> lease end, ms), own wake list,
-- the record of the last holder broken as dead.
-- ARGV: record before its fence, record after it, ttl ms (0: none), this
-- waiter's id, how to wait (fair | barge | try-fair | try), a waiter's
-- lease in ms, a stale record to break (or ''), the wake lists' prefix,
-- and the time (server ms, 0: none) after which the caller no longer waits
-- for this answer.
-- Returns {'taken', fence, the dead holder's record it took over from or ''} or {'busy', holder record or '', pttl, waiters ahead}
-- or {'late'} for a request that came after its caller gave up (held up in
-- a stopped server), or {'foreign'} / {'fence'} for keys that hold what no
-- acquisition wrote.
local lock, fence_key, queue, alive, own_wake, broken = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local before, after, ttl, me, how = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local lease, stale, wake_prefix = tonumber(ARGV[6]), ARGV[7], ARGV[8]
local now_ms, now_us = server_time()
if too_late(tonumber(ARGV[9]), now_ms) then
  return {'late'}
end
if not types_fit({[lock] = 'string', [fence_key] = 'string', [queue] = 'list', [alive] = 'zset', [broken] = 'string'}) then
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
-- A dead holder broken here is told to whoever takes the lock next (in a
-- fair line, often another waiter), with the fence it held.
if current and stale ~= '' and current == stale then
  redis.call('DEL', lock)
  redis.call('SET', broken, (redis.call('GET', fence_key) or '0') .. '\n' .. current, 'PX', 4 * lease)
  current = false
end

local fair = how == 'fair' or how == 'try-fair'
if not current and (not fair or not head or head == me) then
  local last = last_fence(fence_key)
  if not last then
    return {'fence'}
  end
  -- Told only if nothing took the lock since the break: a taker that runs
  -- no script of ours would have moved the fence on without reading it.
  local took_over = ''
  local left = redis.call('GET', broken)
  if left then
    redis.call('DEL', broken)
    local at, record = string.match(left, '^(%d+)\n(.*)$')
    if at and at == (redis.call('GET', fence_key) or '0') then
      took_over = record
    end
  end
  local fence = next_fence(last, now_us)
  redis.call('SET', fence_key, fence)
  if ttl > 0 then
    redis.call('SET', lock, before .. fence .. after, 'PX', ttl)
  else
    redis.call('SET', lock, before .. fence .. after)
  end
  -- A waiter that had a place gives it up; one that had none has no
  -- wake list either (or one that runs out with its lease).
  if redis.call('ZREM', alive, me) == 1 then
    redis.call('LREM', queue, 1, me)
    redis.call('DEL', own_wake)
  end
  return {'taken', fence, took_over}
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
