"""Minimal `lockrun KEY -- CMD` equivalent on pottery's Redlock (one master)."""
import subprocess, sys
import redis
from pottery import Redlock

url, key, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
lock = Redlock(key=key, masters={redis.Redis.from_url(url)}, auto_release_time=30)
if not lock.acquire(blocking=False):
    sys.exit(75)
try:
    code = subprocess.call(cmd)
finally:
    lock.release()
sys.exit(code)
