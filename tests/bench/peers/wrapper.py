"""A minimal `lockrun KEY -- CMD` equivalent on a Python lock library, as a user would write it:

    python wrapper.py redis-py|python-redis-lock|pottery URL KEY CMD [ARGS]...

Only the chosen library is imported, so each run pays exactly what that wrapper would.
"""
import subprocess
import sys


def make_lock(lib, url, key):
    import redis

    conn = redis.Redis.from_url(url)
    if lib == "redis-py":
        return conn.lock(key, timeout=30, blocking=False)
    if lib == "python-redis-lock":
        import redis_lock  # with its auto-renewal thread, like lockrun's watchdog

        return redis_lock.Lock(conn, key, expire=30, auto_renewal=True)
    if lib == "pottery":
        from pottery import Redlock  # Redlock over one master

        return Redlock(key=key, masters={conn}, auto_release_time=30)
    sys.exit(f"unknown library {lib}")


lib, url, key, cmd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
lock = make_lock(lib, url, key)
if not lock.acquire(blocking=False):
    sys.exit(75)
try:
    code = subprocess.call(cmd)
finally:
    lock.release()
sys.exit(code)
