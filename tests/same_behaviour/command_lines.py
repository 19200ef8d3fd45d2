#!/usr/bin/env python3
"""Whether two lockrun builds answer command lines alike: N random command lines (options valid
and not, keys, commands, operators' commands) through both binaries, comparing exit codes, stdout
and stderr with what differs per run masked (times, pids, tokens, durations; a retry line once).
Prints the first differences and a count; a refactor's count must be 0.
Usage: python3 tests/same_behaviour/command_lines.py OLD NEW N SEED REDIS_URL"""
import os, random, re, subprocess, sys, tempfile
old, new, n, seed, url = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rng = random.Random(seed)
tmp = tempfile.mkdtemp()
open(os.path.join(tmp, 'pw'), 'w').write('secret\n')
durs = ['0', '1', '500ms', '30s', '5m', '1h', '1d', 'forever', '-1', 'x', '', '100000h', '99ms', '2s', '1m', '366d', '367d']
nums = ['0', '1', '2', '100000', '100001', '-3', 'abc', '255', '256', '75']
opts = [
    ('-t', durs), ('--ttl', durs), ('-w', durs), ('--wait', durs), ('-E', nums), ('-l', nums), ('--limit', nums),
    ('--shared', None), ('--every', durs), ('--standby', None), ('--spread', durs), ('--min-hold', durs),
    ('--history', nums), ('--time-limit', durs), ('--kill-after', durs), ('--on-lost', ['continue', 'terminate', 'x']),
    ('--no-group', None), ('--subreaper', None), ('--metrics-file', [os.path.join(tmp, 'm.prom'), '/nonexistent/dir/m.prom']),
    ('--ping', ['http://127.0.0.1:1/p', 'https:///uuid', 'ftp://x', 'http:abc']), ('--ping-file', ['/nonexistent', os.path.join(tmp, 'pw')]),
    ('--node-timeout', durs), ('--redis-user', ['u', '']), ('--redis-password-file', [os.path.join(tmp, 'pw'), '/nonexistent']),
    ('--acks', nums), ('--fsync', None), ('-q', None), ('-v', None), ('-vv', None), ('--log-format', ['json', 'text', 'x']),
    ('--bogus', None), ('-Z', None), ('--tls-insecure', None),
]
verbs = [['status'], ['list'], ['list', '--all'], ['history'], ['release'], ['release', '--force'], ['doctor'], ['run']]
urls = [url, 'redis://127.0.0.1:1', 'redis://', 'bogus://x', 'redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3', url + ',' + url]
cmds = [['true'], ['sh', '-c', 'exit 3'], ['/nonexistent/cmd'], ['sh', '-c', 'echo $LOCKRUN_FENCE >/dev/null; echo hi'], []]

def line(i):
    args = []
    if rng.random() < 0.9:
        args += ['-r', rng.choice(urls)]
    for _ in range(rng.randint(0, 4)):
        o, vals = rng.choice(opts)
        args.append(o)
        if vals is not None:
            v = rng.choice(vals)
            if rng.random() < 0.3 and o.startswith('--'):
                args[-1] = o + '=' + v
            else:
                args.append(v)
    key = f'k{seed}-{i}-TAG' if rng.random() < 0.9 else rng.choice(['lockrun:x', '', 'status'])
    r = rng.random()
    if r < 0.15:
        v = rng.choice(verbs)
        return v + args + [key] + (['--json'] if rng.random() < 0.5 else [])
    if r < 0.2:
        return args + [rng.choice(['--help', '-h', '--version'])]
    c = rng.choice(cmds)
    return args + [key] + (['--'] if rng.random() < 0.7 else []) + c

mask = [
    (re.compile(r'\d{4}-\d\d-\d\dT[\d:.]+Z'), 'T'),
    (re.compile(r'fence=\d+'), 'fence=F'), (re.compile(r'"fence":\s*\d+'), '"fence":F'),
    (re.compile(r'pid[=:"\s]+\d+'), 'pid=P'), (re.compile(r'\b[0-9a-f]{40}\b'), 'SHA'),
    (re.compile(r'\b[0-9a-f-]{36}\b'), 'UUID'), (re.compile(r'\d+(\.\d+)?(ms|µs|s)\b'), 'D'),
    (re.compile(r'"(held|queued|duration|ttl|left|wait|since)[a-z_]*":\s*[\d.]+'), r'"\1":N'),
    (re.compile(r'started=[^ "]+'), 'started=S'), (re.compile(r'\d{10,}'), 'N'),
    (re.compile(r'±[0-9.]+'), '±X'), (re.compile(r'-(old|new)\b'), '-TAG'), (re.compile(r'\{[0-9a-f]{12}\}'), '{ID}'), (re.compile(r'\b[0-9a-f]{12,16}\b'), 'HEX'),
]
def m(s):
    s = s.decode(errors='replace')
    for rx, rep in mask:
        s = rx.sub(rep, s)
    # A retry line repeats as often as the clock allows: once is what is compared.
    out = []
    for l in s.split('\n'):
        if not out or l != out[-1]:
            out.append(l)
    return '\n'.join(out)

diffs = 0
for i in range(n):
    a = line(i)
    res = []
    for b, tag in ((old, 'old'), (new, 'new')):
        env = {'PATH': os.environ['PATH'], 'HOME': '/root'}
        # Each binary its own keys: a run's key may be kept (--every, --min-hold) for the other.
        args = [w.replace('TAG', tag) for w in a]
        try:
            p = subprocess.run([b] + args, capture_output=True, timeout=20, env=env, stdin=subprocess.DEVNULL)
            res.append((p.returncode, m(p.stdout), m(p.stderr)))
        except subprocess.TimeoutExpired:
            res.append(('timeout', '', ''))
    if res[0] != res[1]:
        diffs += 1
        if diffs <= 5:
            print('DIFF', a); print(' old', res[0]); print(' new', res[1])
print(f'{n} lines, {diffs} differ')
