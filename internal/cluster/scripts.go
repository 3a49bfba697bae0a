package cluster

import "github.com/redis/go-redis/v9"

// Times in the scripts are microseconds since the Unix epoch, as Lua numbers
// (doubles): exact integers up to 2⁵³ µs, and at today's ~1.8·10¹⁵ µs a
// fraction is kept to 0.25 µs, so the emission interval T can be fractional
// (1/3000 s = 333.33 µs) and GCRA stays exact to well under a microsecond per
// decision. TATs are stored as decimal strings of such numbers.

// takeScript is GCRA for a lease: it admits as many of want units as conform
// now (none, some or all), counting them at once, like want single requests.
//
//	KEYS[1] the bucket; ARGV: now µs, T µs, burst, want, batch (≤ burst)
//
// It returns {granted, TAT − now in µs, wait in µs}: wait, when fewer than
// want were granted, is how long until batch units will conform, so that a
// starved instance asks again for a useful slice rather than for every unit.
var takeScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local t = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local batch = tonumber(ARGV[5])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local avail = math.floor((now + burst * t - tat) / t + 1e-6)
local g = want
if avail < g then g = avail end
if g < 0 then g = 0 end
if g > 0 then
  tat = tat + g * t
  redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
end
local wait = 0
if g < want then
  wait = tat + (batch - burst) * t - now
  if wait < 0 then wait = 0 end
end
return {g, math.floor(tat - now), math.ceil(wait)}
`)

// giveScript returns units taken but not spent: the bucket's TAT moves back
// by their cost (a bucket that would be more than full is simply full).
//
//	KEYS[1] the bucket; ARGV: now µs, T µs, units
var giveScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local now = tonumber(ARGV[1])
local tat = tonumber(v) - tonumber(ARGV[3]) * tonumber(ARGV[2])
if tat <= now then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
return 1
`)

// beatScript records this instance as live and counts the live ones.
//
//	KEYS[1] the instance set; ARGV: now ms, ttl ms, instance id
var beatScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
`)

// bwScript publishes this instance's bandwidth demand for one app and
// returns every live instance's, dropping those not renewed within ttl.
//
//	KEYS[1] the app's demand hash; ARGV: now ms, ttl ms, instance id, bytes/s
//
// It returns {id, bytes/s, id, bytes/s, ...}.
var bwScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4] .. ' ' .. ARGV[1])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local d, at = string.match(all[i + 1], '^(%d+) (%d+)$')
  if d == nil or tonumber(at) < now - ttl then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = d
  end
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return out
`)
