#!/usr/bin/env python3
"""MONITOR lines -> the set of command shapes: values that differ per run masked, EVAL and
EVALSHA of one script the same line (which process loads a script first is timing)."""
import hashlib, re, sys
out = set()
for line in sys.stdin:
    line = line.rstrip('\n')
    m = re.match(r'^[0-9.]+ \[[^]]*\] (.*)$', line)
    if not m:
        continue
    words = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))
    if not words:
        continue
    if words[0] == 'EVAL':
        text = bytes(words[1], 'utf-8').decode('unicode_escape').encode('latin-1')
        words = ['SCRIPT', hashlib.sha1(text).hexdigest()[:8]] + words[2:]
    elif words[0] == 'EVALSHA':
        words = ['SCRIPT', words[1][:8]] + words[2:]
    masked = []
    for w in words:
        w = re.sub(r'[0-9a-f]{40}', 'SHA', w)
        w = re.sub(r'host=\S*', 'host=H', w)
        w = re.sub(r'pid=\d+', 'pid=P', w)
        w = re.sub(r'started=\S*', 'started=S', w)
        w = re.sub(r'\{[0-9a-f]{12}\}', '{ID}', w)
        w = re.sub(r'\d+', 'n', w)
        masked.append(w)
    out.add(' '.join(masked))
for l in sorted(out):
    print(l)
