//! A line's words read as a clap definition reads them, before clap does: where the first word
//! that is neither an option nor an option's value is (which form the line is), and the values
//! an option has on it (which log format its errors are said in).

use std::ffi::OsString;

/// Reads the words `from` on as `cmd` does, up to `--` or the first word that is neither an
/// option nor an option's value, and says where that word is. Which options take a value comes
/// from `cmd`'s own arguments; each that does is handed to `option` with its value, `None`
/// when clap would refuse the next word as one (it looks like an option).
pub(super) fn scan<'c>(
    cmd: &'c clap::Command,
    argv: &[OsString],
    from: usize,
    mut option: impl FnMut(&'c clap::Arg, Option<String>),
) -> Option<usize> {
    let takes_value = |a: &&clap::Arg| a.get_action().takes_values();
    let words: Vec<_> = argv.iter().map(|w| w.to_string_lossy()).collect();
    let mut i = from;
    while i < words.len() && words[i] != "--" {
        let word = &words[i];
        // The option that takes a value, and the value in the same word.
        let (arg, value) = if let Some(long) = word.strip_prefix("--") {
            let (name, value) = long
                .split_once('=')
                .map_or((long, None), |(n, v)| (n, Some(v)));
            let arg = cmd.get_arguments().find(|a| a.get_long() == Some(name));
            (arg.filter(takes_value), value)
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // A cluster like `-vq`, or `-t5s` / `-t 5s`: the first short option that takes a
            // value ends the cluster, and takes the next word when nothing follows it.
            let taking = shorts.char_indices().find_map(|(at, c)| {
                let arg = cmd.get_arguments().find(|a| a.get_short() == Some(c));
                Some((arg.filter(takes_value)?, &shorts[at + c.len_utf8()..]))
            });
            taking.map_or((None, None), |(a, rest)| {
                (Some(a), Some(rest).filter(|r| !r.is_empty()))
            })
        } else {
            return Some(i);
        };
        if let Some(arg) = arg {
            let next = words
                .get(i + 1)
                .filter(|w| value.is_none() && takes(arg, w));
            i += usize::from(next.is_some());
            option(arg, value.or(next.map(|w| &**w)).map(str::to_string));
        }
        i += 1;
    }
    None
}

/// Whether option `a` takes word `w` as its value, as clap does: not a word that looks like an
/// option, unless `a` allows that.
fn takes(a: &clap::Arg, w: &str) -> bool {
    !w.starts_with('-')
        || w == "-"
        || a.is_allow_hyphen_values_set()
        || (a.is_allow_negative_numbers_set() && w[1..].parse::<f64>().is_ok())
}

/// The values option `id` has on a line as `cmd` reads it: before the line's first word, then
/// in the command it names (up to `--`) or, in a run, before COMMAND.
pub(super) fn values_of(cmd: &clap::Command, argv: &[OsString], id: &str) -> Vec<Option<String>> {
    let mut values = Vec::new();
    let mut each = |a: &clap::Arg, v: Option<String>| {
        if a.get_id() == id {
            values.push(v);
        }
    };
    let mut at = scan(cmd, argv, 1, &mut each);
    // The definition that reads the words after the first, and how many words it reads options
    // beyond: a run's KEY (with `run`, its own word too), every word of a command.
    let (rest, mut past) = match at.and_then(|i| cmd.find_subcommand(&argv[i])) {
        Some(run) if run.get_name() == "run" => (run, 2),
        Some(verb) => (verb, usize::MAX),
        None => (cmd, 1),
    };
    while let Some(i) = at.filter(|_| past > 0) {
        past -= 1;
        at = scan(rest, argv, i + 1, &mut each);
    }
    values
}
