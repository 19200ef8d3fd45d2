"""Minimal `lockrun KEY -- CMD` equivalent on redis-py's Lock (what many Python cron jobs use)."""
import subprocess, sys
import redis

url, key, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
lock = redis.Redis.from_url(url).lock(key, timeout=30, blocking=False)
if not lock.acquire():
    sys.exit(75)
try:
    code = subprocess.call(cmd)
finally:
    lock.release()
sys.exit(code)
