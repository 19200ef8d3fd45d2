# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_lockrun_global_optspecs
    string join \n t/ttl= w/wait= E/conflict-exit-code= l/limit= shared every= standby standbys= spread= min-hold= history= time-limit= kill-after= on-lost= no-group subreaper metrics-file= ping= ping-file= r/redis= node-timeout= redis-user= redis-password-file= tls-ca= tls-cert= tls-key= tls-insecure sentinel-password-file= acks= fsync q/quiet v/verbose log-format= h/help V/version
end

function __fish_lockrun_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_lockrun_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_lockrun_using_subcommand
    set -l cmd (__fish_lockrun_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c lockrun -n "__fish_lockrun_needs_command" -s t -l ttl -d 'Lease length, renewed every TTL/3' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -s w -l wait -d 'How long to wait for a held lock' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -s E -l conflict-exit-code -d 'Exit code when the lock is held' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -s l -l limit -d 'Let up to N holders run at once (a semaphore)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l every -d 'The job\'s period: keep the lock for the tick' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l standbys -d 'With --standby: how many hosts stand by for a tick [default: 2]' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l spread -d 'With --every: wait a random time up to DURATION before trying, so that the hosts take turns running the ticks' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l min-hold -d 'Keep the lock at least this long after acquiring, even if the command finishes sooner (at most 30d); the low-level knob behind --every, which it overrides (it must then be shorter than the period)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l history -d 'Keep about the last N runs of KEY for `lockrun history` (a Redis stream beside the lock, written by the scripts lockrun runs anyway; gone 39 to 40 days after the key\'s last run); 0 to 10000, 0: record nothing' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l time-limit -d 'Stop the command after this long (exit 124)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l kill-after -d 'Grace between SIGTERM and SIGKILL' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l on-lost -d 'What to do with the command when the lock is lost' -r -f -a "terminate\t'Stop the command (SIGTERM, then SIGKILL after --kill-after) and exit 76'
continue\t'Log a warning, let the command finish, and exit with its code'"
complete -c lockrun -n "__fish_lockrun_needs_command" -l metrics-file -d 'Write how the run ended to PATH, for Prometheus' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l ping -d 'Report the job\'s start and end to a health-check URL (healthchecks.io\'s convention)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l ping-file -d 'Read the --ping URL from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -s r -l redis -d 'Redis URL (default redis://127.0.0.1:6379)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l node-timeout -d 'Bound on each Redis request, below TTL/3. With several masters, per node (default TTL/10 within 10ms..1s); with one, the request timeout (default TTL/3 within 50ms..3s)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l redis-user -d 'ACL user to authenticate as' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l redis-password-file -d 'Read the Redis password from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l tls-ca -d 'Trust only the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l tls-cert -d 'Present this client certificate (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l tls-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l sentinel-password-file -d 'redis+sentinel://: read the sentinels\' own password from FILE (the URL\'s password is the data nodes\'). Or set LOCKRUN_SENTINEL_PASSWORD (not both)' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l acks -d 'Count the lock only once N replicas have it' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l log-format -d 'Log line format: text or json' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_needs_command" -l shared -d 'Take KEY in shared mode: shared runs go side by side, never with an exclusive one'
complete -c lockrun -n "__fish_lockrun_needs_command" -l standby -d 'With --every: stay ready to run this tick if the host that took it cannot finish it'
complete -c lockrun -n "__fish_lockrun_needs_command" -l no-group -d 'Signal only the direct child, not its process group'
complete -c lockrun -n "__fish_lockrun_needs_command" -l subreaper -d 'Adopt and reap orphaned descendants (automatic when lockrun is PID 1)'
complete -c lockrun -n "__fish_lockrun_needs_command" -l tls-insecure -d 'TLS without verifying the server\'s certificate: only for testing, it allows anyone on the path to impersonate the server (logged as a warning on every run)'
complete -c lockrun -n "__fish_lockrun_needs_command" -l fsync -d 'Count the lock only once it is on disk (WAITAOF)'
complete -c lockrun -n "__fish_lockrun_needs_command" -s q -l quiet -d 'Print errors only'
complete -c lockrun -n "__fish_lockrun_needs_command" -s v -l verbose -d 'More detail (-vv for trace)'
complete -c lockrun -n "__fish_lockrun_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_needs_command" -s V -l version -d 'Print version'
complete -c lockrun -n "__fish_lockrun_needs_command" -a "status" -d 'Who holds KEY, since when, its TTL, fence and queue'
complete -c lockrun -n "__fish_lockrun_needs_command" -a "list" -d 'Every held lock, sorted by key (--all: also free ones)'
complete -c lockrun -n "__fish_lockrun_needs_command" -a "release" -d 'Delete a stuck lock (needs --force); logs what was deleted'
complete -c lockrun -n "__fish_lockrun_needs_command" -a "history" -d 'The last runs of KEY, newest first: when, host, pid, fence, outcome'
complete -c lockrun -n "__fish_lockrun_needs_command" -a "doctor" -d 'Check a Redis server for lock safety, one line per finding'
complete -c lockrun -n "__fish_lockrun_needs_command" -a "run" -d 'Run COMMAND under KEY, for a lock named like one of these commands'
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -s r -l redis -d 'Redis URL (default redis://127.0.0.1:6379)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l redis-user -d 'ACL user to authenticate as' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l redis-password-file -d 'Read the Redis password from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l tls-ca -d 'Trust only the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l tls-cert -d 'Present this client certificate (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l tls-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l sentinel-password-file -d 'redis+sentinel://: read the sentinels\' own password from FILE (the URL\'s password is the data nodes\'). Or set LOCKRUN_SENTINEL_PASSWORD (not both)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l log-format -d 'Log line format: text or json' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l node-timeout -d 'Bound on each Redis request (default 3s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l tls-insecure -d 'TLS without verifying the server\'s certificate: only for testing, it allows anyone on the path to impersonate the server (logged as a warning on every run)'
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l json -d 'Print one JSON document on stdout instead of text'
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -s v -l verbose -d 'More detail (-vv for trace)'
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -s q -l quiet -d 'Print errors only'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -s r -l redis -d 'Redis URL (default redis://127.0.0.1:6379)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l redis-user -d 'ACL user to authenticate as' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l redis-password-file -d 'Read the Redis password from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l tls-ca -d 'Trust only the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l tls-cert -d 'Present this client certificate (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l tls-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l sentinel-password-file -d 'redis+sentinel://: read the sentinels\' own password from FILE (the URL\'s password is the data nodes\'). Or set LOCKRUN_SENTINEL_PASSWORD (not both)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l log-format -d 'Log line format: text or json' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l node-timeout -d 'Bound on each Redis request (default 3s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l all -d 'Also free keys lockrun has locked in the last 40 days'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l tls-insecure -d 'TLS without verifying the server\'s certificate: only for testing, it allows anyone on the path to impersonate the server (logged as a warning on every run)'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l json -d 'Print one JSON document on stdout instead of text'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -s v -l verbose -d 'More detail (-vv for trace)'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -s q -l quiet -d 'Print errors only'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -s r -l redis -d 'Redis URL (default redis://127.0.0.1:6379)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l redis-user -d 'ACL user to authenticate as' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l redis-password-file -d 'Read the Redis password from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l tls-ca -d 'Trust only the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l tls-cert -d 'Present this client certificate (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l tls-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l sentinel-password-file -d 'redis+sentinel://: read the sentinels\' own password from FILE (the URL\'s password is the data nodes\'). Or set LOCKRUN_SENTINEL_PASSWORD (not both)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l log-format -d 'Log line format: text or json' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l node-timeout -d 'Bound on each Redis request (default 3s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l force -d 'Really delete it, even if a holder still runs'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l tls-insecure -d 'TLS without verifying the server\'s certificate: only for testing, it allows anyone on the path to impersonate the server (logged as a warning on every run)'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l json -d 'Print one JSON document on stdout instead of text'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -s v -l verbose -d 'More detail (-vv for trace)'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -s q -l quiet -d 'Print errors only'
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -s n -l count -d 'How many runs to show at most' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -s r -l redis -d 'Redis URL (default redis://127.0.0.1:6379)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l redis-user -d 'ACL user to authenticate as' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l redis-password-file -d 'Read the Redis password from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l tls-ca -d 'Trust only the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l tls-cert -d 'Present this client certificate (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l tls-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l sentinel-password-file -d 'redis+sentinel://: read the sentinels\' own password from FILE (the URL\'s password is the data nodes\'). Or set LOCKRUN_SENTINEL_PASSWORD (not both)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l log-format -d 'Log line format: text or json' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l node-timeout -d 'Bound on each Redis request (default 3s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l tls-insecure -d 'TLS without verifying the server\'s certificate: only for testing, it allows anyone on the path to impersonate the server (logged as a warning on every run)'
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -l json -d 'Print one JSON document on stdout instead of text'
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -s v -l verbose -d 'More detail (-vv for trace)'
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand history" -s q -l quiet -d 'Print errors only'
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -s r -l redis -d 'Redis URL (default redis://127.0.0.1:6379)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l redis-user -d 'ACL user to authenticate as' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l redis-password-file -d 'Read the Redis password from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l tls-ca -d 'Trust only the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l tls-cert -d 'Present this client certificate (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l tls-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l sentinel-password-file -d 'redis+sentinel://: read the sentinels\' own password from FILE (the URL\'s password is the data nodes\'). Or set LOCKRUN_SENTINEL_PASSWORD (not both)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l log-format -d 'Log line format: text or json' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l node-timeout -d 'Bound on each Redis request (default 3s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l tls-insecure -d 'TLS without verifying the server\'s certificate: only for testing, it allows anyone on the path to impersonate the server (logged as a warning on every run)'
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -l json -d 'Print one JSON document on stdout instead of text'
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -s v -l verbose -d 'More detail (-vv for trace)'
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand doctor" -s q -l quiet -d 'Print errors only'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -s t -l ttl -d 'Lease length, renewed every TTL/3' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -s w -l wait -d 'How long to wait for a held lock' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -s E -l conflict-exit-code -d 'Exit code when the lock is held' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -s l -l limit -d 'Let up to N holders run at once (a semaphore)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l every -d 'The job\'s period: keep the lock for the tick' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l standbys -d 'With --standby: how many hosts stand by for a tick [default: 2]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l spread -d 'With --every: wait a random time up to DURATION before trying, so that the hosts take turns running the ticks' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l min-hold -d 'Keep the lock at least this long after acquiring, even if the command finishes sooner (at most 30d); the low-level knob behind --every, which it overrides (it must then be shorter than the period)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l history -d 'Keep about the last N runs of KEY for `lockrun history` (a Redis stream beside the lock, written by the scripts lockrun runs anyway; gone 39 to 40 days after the key\'s last run); 0 to 10000, 0: record nothing' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l time-limit -d 'Stop the command after this long (exit 124)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l kill-after -d 'Grace between SIGTERM and SIGKILL' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l on-lost -d 'What to do with the command when the lock is lost' -r -f -a "terminate\t'Stop the command (SIGTERM, then SIGKILL after --kill-after) and exit 76'
continue\t'Log a warning, let the command finish, and exit with its code'"
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l metrics-file -d 'Write how the run ended to PATH, for Prometheus' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l ping -d 'Report the job\'s start and end to a health-check URL (healthchecks.io\'s convention)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l ping-file -d 'Read the --ping URL from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -s r -l redis -d 'Redis URL (default redis://127.0.0.1:6379)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l node-timeout -d 'Bound on each Redis request, below TTL/3. With several masters, per node (default TTL/10 within 10ms..1s); with one, the request timeout (default TTL/3 within 50ms..3s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l redis-user -d 'ACL user to authenticate as' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l redis-password-file -d 'Read the Redis password from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l tls-ca -d 'Trust only the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l tls-cert -d 'Present this client certificate (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l tls-key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l sentinel-password-file -d 'redis+sentinel://: read the sentinels\' own password from FILE (the URL\'s password is the data nodes\'). Or set LOCKRUN_SENTINEL_PASSWORD (not both)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l acks -d 'Count the lock only once N replicas have it' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l log-format -d 'Log line format: text or json' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l shared -d 'Take KEY in shared mode: shared runs go side by side, never with an exclusive one'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l standby -d 'With --every: stay ready to run this tick if the host that took it cannot finish it'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l no-group -d 'Signal only the direct child, not its process group'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l subreaper -d 'Adopt and reap orphaned descendants (automatic when lockrun is PID 1)'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l tls-insecure -d 'TLS without verifying the server\'s certificate: only for testing, it allows anyone on the path to impersonate the server (logged as a warning on every run)'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -l fsync -d 'Count the lock only once it is on disk (WAITAOF)'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -s q -l quiet -d 'Print errors only'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -s v -l verbose -d 'More detail (-vv for trace)'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand run" -s V -l version -d 'Print version'
