"""Minimal `lockrun KEY -- CMD` equivalent on python-redis-lock (with its auto-renewal thread)."""
import subprocess, sys
import redis, redis_lock

url, key, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
lock = redis_lock.Lock(redis.Redis.from_url(url), key, expire=30, auto_renewal=True)
if not lock.acquire(blocking=False):
    sys.exit(75)
try:
    code = subprocess.call(cmd)
finally:
    lock.release()
sys.exit(code)
