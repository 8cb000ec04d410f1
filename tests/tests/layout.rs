//! The alarms that keep the house readable, over every crate users build
//! (protocol, judge, node, cli, relay; the test harness aside): no source
//! file over 800 lines of code, no state owner over 12 fields, no
//! `impl X` outside X's own file, no loop of imports between source files,
//! no function over 150 lines, and no function taking so many arguments
//! that clippy had to be silenced. A file's unit tests are cut off at an
//! inline `mod tests {` only: a `mod tests;` declaration hides nothing.
//!
//! What breaks a rule today and is being split (issue 35) is listed in
//! `KNOWN`, exactly: a listed place that no longer breaks its rule fails
//! the test too, so the list only shrinks.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates users build, by folder.
const CRATES: [&str; 5] = ["protocol", "judge", "node", "cli", "relay"];
const MAX_LINES: usize = 800;
const MAX_FIELDS: usize = 12;
const MAX_FN_LINES: usize = 150;

/// Places that break a rule today, each to be split: "rule place". A
/// circle found is known when a listed circle holds all its files (one
/// that shrinks as it is opened stays known); a listed one is mended when
/// no circle found shares a file with it.
const KNOWN: &[&str] = &[];

/// Structs that mirror a contract field for field (the API's views, the
/// parsed configuration and command lines, the store's records, the
/// judge's feature vector, the sled store's handle per tree, what an actor
/// is started with): data, not state owners. A file, or `file:Struct`.
const DATA: [&str; 11] = [
    "node/src/api/sent.rs",
    "node/src/api/bus.rs",
    "node/src/api/views.rs",
    "judge/src/features.rs",
    "node/src/config.rs",
    "node/src/store/records.rs",
    "node/src/store/sled_store.rs",
    "node/src/mail/setup.rs:MailSetup",
    "relay/src/lib.rs:Config",
    "relay/src/main.rs:Cli",
    "cli/src/main.rs:Cli",
];

/// One source file: its path from the workspace root, its module path in
/// its crate (`["mail", "inbox"]`), and its code without comments or unit
/// tests.
struct Source {
    path: String,
    crate_dir: &'static str,
    module: Vec<String>,
    code: String,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sources() -> Vec<Source> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                // A folder of unit tests (mail/tests/) is tests.
                if p.file_name().is_some_and(|n| n != "tests") {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut out = vec![];
    for krate in CRATES {
        let src = root().join(krate).join("src");
        let mut files = vec![];
        walk(&src, &mut files);
        files.sort();
        for p in files {
            let name = p.file_name().unwrap().to_str().unwrap();
            if matches!(name, "tests.rs" | "testing.rs") {
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_str().unwrap().to_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            // A binary of its own (src/bin/x.rs) is a crate root.
            if module.first().is_some_and(|m| m == "bin") {
                module.clear();
            }
            let text = std::fs::read_to_string(&p).unwrap();
            out.push(Source {
                path: format!("{krate}/src/{}", rel.display()),
                crate_dir: krate,
                module,
                code: without_comments(cut_tests(&text)),
            });
        }
    }
    out
}

/// The file up to its inline unit tests (`#[cfg(test)]` then `mod tests {`).
fn cut_tests(text: &str) -> &str {
    let mut at = 0;
    while let Some(i) = text[at..].find("mod tests {") {
        let i = at + i;
        let before = text[..i].trim_end();
        if before.ends_with("#[cfg(test)]") {
            return &text[..before.len() - "#[cfg(test)]".len()];
        }
        at = i + 1;
    }
    text
}

/// Line comments and doc comments blanked (the lines stay, so counts and
/// line numbers hold); string contents are kept, `//` inside a string
/// literal included.
fn without_comments(code: &str) -> String {
    code.lines()
        .map(|l| {
            let mut in_str = false;
            let mut prev = ' ';
            for (i, c) in l.char_indices() {
                if c == '"' && prev != '\\' {
                    in_str = !in_str;
                }
                if !in_str && c == '/' && prev == '/' {
                    return &l[..i - 1];
                }
                prev = if prev == '\\' && c == '\\' { ' ' } else { c };
            }
            l
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Lines of the file before its inline unit tests, comments included (a
/// file long with comments is long to read).
fn lines_of_code(code: &str) -> usize {
    code.lines().count()
}

/// (name, fields) of each struct with named fields.
fn struct_fields(code: &str) -> Vec<(String, usize)> {
    let mut out = vec![];
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = item_after_visibility(line).strip_prefix("struct ") else {
            continue;
        };
        if line.starts_with(' ') || !rest.trim_end().ends_with('{') {
            continue;
        }
        let mut fields = 0;
        for l in lines.by_ref() {
            if l == "}" {
                break;
            }
            let f = item_after_visibility(l.strip_prefix("    ").unwrap_or(""));
            if !l.starts_with("     ") && f.split_once(':').is_some_and(|(n, _)| is_ident(n)) {
                fields += 1;
            }
        }
        out.push((ident_at(rest), fields));
    }
    out
}

fn item_after_visibility(line: &str) -> &str {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix("pub(") {
        return rest.split_once(") ").map_or(t, |(_, r)| r);
    }
    t.strip_prefix("pub ").unwrap_or(t)
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn ident_at(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// (name, first line, lines) of each function with a body: from its `fn`
/// line to the line closing it at the same indentation.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = vec![];
    for (i, line) in lines.iter().enumerate() {
        let t = item_after_visibility(line);
        let t = ["const ", "async ", "unsafe ", "extern \"C\" "]
            .iter()
            .fold(t, |t, p| t.strip_prefix(p).unwrap_or(t));
        let Some(rest) = t.strip_prefix("fn ") else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let close = format!("{}}}", " ".repeat(indent));
        // A declaration without a body ends in `;` before any `{`.
        let body = lines[i..]
            .iter()
            .position(|l| l.contains('{') || l.trim_end().ends_with(';'))
            .is_some_and(|j| lines[i + j].contains('{'));
        if !body {
            continue;
        }
        if let Some(end) = lines[i..]
            .iter()
            .position(|l| *l == close || (l.starts_with(&close) && l.trim_end().ends_with('}')))
        {
            out.push((ident_at(rest), i + 1, end + 1));
        }
    }
    out
}

/// The types each file defines: struct and enum names.
fn defined_types(code: &str) -> Vec<String> {
    code.lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| {
            let t = item_after_visibility(l);
            t.strip_prefix("struct ")
                .or_else(|| t.strip_prefix("enum "))
                .map(ident_at)
        })
        .collect()
}

/// The types a file has inherent `impl X` blocks for (trait impls aside).
fn inherent_impls(code: &str) -> Vec<String> {
    code.lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| {
            let rest = l.strip_prefix("impl")?;
            // `impl<T: Bound> X<T> {`: skip the generics.
            let rest = if let Some(r) = rest.strip_prefix('<') {
                let mut depth = 1;
                let end = r.char_indices().find(|&(_, c)| {
                    depth += match c {
                        '<' => 1,
                        '>' => -1,
                        _ => 0,
                    };
                    depth == 0
                })?;
                &r[end.0 + 1..]
            } else {
                rest
            };
            let rest = rest.strip_prefix(' ')?;
            (!rest.contains(" for ")).then(|| ident_at(rest))
        })
        .filter(|n| !n.is_empty())
        .collect()
}

/// The module paths a file names: every `use` tree expanded, and every
/// path in its code that starts at `crate`, `super` or `self`, or at a
/// name its `use`s or `mod`s bind. Relative to nothing: absolute in the
/// crate, as segments.
fn named_paths(src: &Source, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let code = &src.code;
    let mut out = vec![];
    // Names bound to module paths by `use` or `mod` in this file.
    let mut bound: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in children {
        let mut p = src.module.clone();
        p.push(c.clone());
        bound.insert(c.clone(), p);
    }
    // A folder's root (mod.rs, lib.rs, main.rs) that re-exports its
    // children's items shows the folder's face, as declaring them does:
    // that is no import.
    let root = ["/mod.rs", "/lib.rs", "/main.rs"]
        .iter()
        .any(|r| src.path.ends_with(r));
    // `use` statements, whole (they can span lines).
    let mut rest = code.as_str();
    while let Some(i) = find_use(rest) {
        let after = &rest[i..];
        let end = after.find(';').unwrap_or(after.len());
        let line_start = rest[..i].rfind('\n').map_or(0, |n| n + 1);
        if root && rest[line_start..i].trim_start().starts_with("pub") {
            rest = &after[end..];
            continue;
        }
        let stmt = after[..end].strip_prefix("use ").unwrap_or_default();
        let tree: String = stmt.replace(" as ", "@").split_whitespace().collect();
        for path in expand_use(&tree) {
            if let Some(abs) = absolute(&path, &src.module, &bound) {
                let alias = path.last().cloned().unwrap_or_default();
                out.push(abs.clone());
                if alias != "self" && alias != "*" {
                    bound.insert(alias, abs);
                } else if alias == "self" && !abs.is_empty() {
                    bound.insert(abs.last().unwrap().clone(), abs);
                }
            }
        }
        rest = &after[end..];
    }
    // Paths in code: `a::b::c` sequences.
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts = (bytes[i].is_ascii_alphabetic() || bytes[i] == '_')
            && (i == 0
                || !(bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == '_'
                    || bytes[i - 1] == ':'));
        if !starts {
            i += 1;
            continue;
        }
        let mut segs = vec![];
        let mut j = i;
        loop {
            let s: String = bytes[j..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .collect();
            j += s.len();
            segs.push(s);
            if bytes.get(j) == Some(&':') && bytes.get(j + 1) == Some(&':') {
                j += 2;
                if !bytes
                    .get(j)
                    .is_some_and(|c| c.is_ascii_alphabetic() || *c == '_')
                {
                    break;
                }
            } else {
                break;
            }
        }
        if segs.len() > 1
            && let Some(abs) = absolute(&segs, &src.module, &bound)
        {
            out.push(abs);
        }
        i = j.max(i + 1);
    }
    out
}

fn find_use(code: &str) -> Option<usize> {
    let mut at = 0;
    while let Some(i) = code[at..].find("use ") {
        let i = at + i;
        let line_start = code[..i].rfind('\n').map_or(0, |n| n + 1);
        let head = item_after_visibility(&code[line_start..i + 4]);
        if head == "use " {
            return Some(i);
        }
        at = i + 4;
    }
    None
}

/// `a::{b, c::{d, self}}` as [a,b], [a,c,d], [a,c,self]; `x as y` keeps x.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut out) = (0, 0, vec![]);
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(&s[start..]);
        out.into_iter().filter(|p| !p.is_empty()).collect()
    }
    let tree = tree.trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let prefix: Vec<String> = tree[..open]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        return split_top(inner)
            .into_iter()
            .flat_map(expand_use)
            .map(|tail| prefix.iter().cloned().chain(tail).collect())
            .collect();
    }
    // `x as y` names x (the alias is not followed).
    let tree = tree.split('@').next().unwrap_or(tree);
    vec![tree.split("::").map(str::to_owned).collect()]
}

/// `path` as named from `module`, made absolute in the crate; `None` when
/// it leaves the crate.
fn absolute(
    path: &[String],
    module: &[String],
    bound: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let mut segs = path.iter();
    let first = segs.next()?;
    let mut abs: Vec<String> = match first.as_str() {
        "crate" => vec![],
        "self" => module.to_vec(),
        "super" => module[..module.len().checked_sub(1)?].to_vec(),
        name => bound.get(name)?.clone(),
    };
    for s in segs {
        if s == "super" {
            abs.pop()?;
        } else {
            abs.push(s.clone());
        }
    }
    Some(abs)
}

/// The crate's file that `path` names: the longest prefix that is a module
/// with a file.
fn file_of<'a>(path: &[String], files: &'a BTreeMap<Vec<String>, String>) -> Option<&'a String> {
    (0..=path.len()).rev().find_map(|n| files.get(&path[..n]))
}

/// A folder's root file (mod.rs, lib.rs, main.rs, or `x.rs` beside a
/// folder `x/`) and the files inside the folder are one room: the root declares, re-exports and uses its
/// parts, and its parts use what it holds (`use super::*`). Loops between
/// siblings, or across folders, are tangles.
fn one_room(a: &str, b: &str) -> bool {
    let inside = |root: &str, f: &str| {
        let beside = root.strip_suffix(".rs").map(|x| format!("{x}/"));
        ["mod.rs", "lib.rs", "main.rs"]
            .iter()
            .filter_map(|r| root.strip_suffix(r))
            .any(|dir| f.starts_with(dir))
            || beside.is_some_and(|dir| f.starts_with(&dir))
    };
    inside(a, b) || inside(b, a)
}

/// Each crate's import graph: file -> (file -> names taken).
fn import_graph(all: &[Source]) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for krate in CRATES {
        let srcs: Vec<&Source> = all.iter().filter(|s| s.crate_dir == krate).collect();
        // lib.rs and main.rs are both the root of relay's sources; a
        // binary's root names its library by the crate's name, not `crate`.
        let files: BTreeMap<Vec<String>, String> = srcs
            .iter()
            .filter(|s| {
                !s.path.ends_with("/main.rs") || !srcs.iter().any(|o| o.path.ends_with("/lib.rs"))
            })
            .filter(|s| !s.path.contains("/bin/"))
            .map(|s| (s.module.clone(), s.path.clone()))
            .collect();
        for s in &srcs {
            let children: BTreeSet<String> = s
                .code
                .lines()
                .filter_map(|l| {
                    item_after_visibility(l)
                        .strip_prefix("mod ")?
                        .strip_suffix(';')
                        .map(str::to_owned)
                })
                .collect();
            let edges = graph.entry(s.path.clone()).or_default();
            for p in named_paths(s, &children) {
                let Some(target) = file_of(&p, &files) else {
                    continue;
                };
                if *target == s.path || one_room(&s.path, target) {
                    continue;
                }
                let module_len = files
                    .iter()
                    .find(|(_, f)| *f == target)
                    .map_or(0, |(m, _)| m.len());
                let name = p.get(module_len).cloned().unwrap_or_else(|| "self".into());
                edges.entry(target.clone()).or_default().insert(name);
            }
        }
    }
    graph
}

/// The strongly connected groups of more than one file (Tarjan's).
fn circles(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct T<'g> {
        graph: &'g BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(t: &mut T<'g>, v: &'g str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.graph.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut group = vec![];
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                group.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                t.out.push(group);
            }
        }
    }
    let mut t = T {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Every place that breaks a rule: (rule, place, why).
fn breaches(all: &[Source]) -> Vec<(&'static str, String, String)> {
    let mut out = vec![];
    let mut defined: BTreeMap<String, Vec<&Source>> = BTreeMap::new();
    for s in all {
        for t in defined_types(&s.code) {
            defined
                .entry(format!("{}:{t}", s.crate_dir))
                .or_default()
                .push(s);
        }
    }
    for s in all {
        if s.code.contains("too_many_arguments") {
            let why = "silences too_many_arguments; pass a request struct";
            out.push(("args", s.path.clone(), why.into()));
        }
        let lines = lines_of_code(&s.code);
        if lines > MAX_LINES {
            out.push(("lines", s.path.clone(), format!("{lines} lines of code")));
        }
        if !DATA.contains(&s.path.as_str()) {
            for (name, fields) in struct_fields(&s.code) {
                let place = format!("{}:{name}", s.path);
                if fields > MAX_FIELDS && !DATA.contains(&place.as_str()) {
                    out.push((
                        "fields",
                        format!("{}:{name}", s.path),
                        format!("{fields} fields"),
                    ));
                }
            }
        }
        for (name, at, len) in functions(&s.code) {
            if len > MAX_FN_LINES {
                out.push((
                    "fn",
                    format!("{}:{name}", s.path),
                    format!("{len} lines from line {at}"),
                ));
            }
        }
        for t in inherent_impls(&s.code) {
            let Some(owners) = defined.get(&format!("{}:{t}", s.crate_dir)) else {
                continue;
            };
            let home = owners.iter().any(|o| {
                o.path == s.path
                    // A type of `a/x.rs` may have parts in `a/x/`.
                    || (!o.path.ends_with("mod.rs")
                        && s.path.starts_with(&format!("{}/", o.path.trim_end_matches(".rs"))))
            });
            if !home {
                let owner = &owners[0].path;
                out.push((
                    "impl",
                    format!("{}:{t}", s.path),
                    format!("impl {t} outside {owner}"),
                ));
            }
        }
    }
    for group in circles(&import_graph(all)) {
        out.push(("circle", group.join(" "), "a loop of imports".into()));
    }
    out.sort();
    out.dedup();
    out
}

/// Unbounded queues in what users run (tests aside), at most: each is
/// argued where it is made (clippy.toml bans the rest). It was 8.
const MAX_UNBOUNDED: usize = 6;

#[test]
fn unbounded_queues_go_down_not_up() {
    let n: usize = sources()
        .iter()
        .map(|s| {
            s.code.matches("unbounded_channel(").count()
                + s.code.matches("unbounded_channel::<").count()
        })
        .sum();
    assert!(
        n <= MAX_UNBOUNDED,
        "{n} unbounded channels (at most {MAX_UNBOUNDED}): bound the new one"
    );
}

#[test]
fn the_house_stays_readable() {
    let all = sources();
    for must in [
        "node/src/mail/mod.rs",
        "cli/src/main.rs",
        "protocol/src/team.rs",
    ] {
        assert!(all.iter().any(|s| s.path == must), "{must} is read");
    }
    let found = breaches(&all);
    let files = |place: &str| place.split(' ').map(str::to_owned).collect::<BTreeSet<_>>();
    let covers = |(kr, kp): (&str, &str), (r, p): (&str, &str)| {
        kr == r && (kp == p || r == "circle" && files(p).is_subset(&files(kp)))
    };
    let touches = |(kr, kp): (&str, &str), (r, p): (&str, &str)| {
        kr == r && (kp == p || r == "circle" && !files(p).is_disjoint(&files(kp)))
    };
    let mut report = vec![];
    for (rule, place, why) in &found {
        let known = KNOWN.iter().filter_map(|k| k.split_once(' '));
        if !known.clone().any(|k| covers(k, (rule, place))) {
            report.push(format!("new: {rule} {place}: {why}"));
        }
    }
    for (rule, place) in KNOWN.iter().filter_map(|k| k.split_once(' ')) {
        if !found.iter().any(|(r, p, _)| touches((rule, place), (r, p))) {
            report.push(format!("mended, take it off KNOWN: {rule} {place}"));
        }
    }
    // The edges of each circle, to open it (shown with --nocapture).
    {
        let graph = import_graph(&all);
        for (rule, place, _) in &found {
            if *rule == "circle" {
                let files: BTreeSet<&str> = place.split(' ').collect();
                for f in &files {
                    for (to, names) in &graph[*f] {
                        if files.contains(to.as_str()) {
                            eprintln!("  {f} -> {to}: {names:?}");
                        }
                    }
                }
            }
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// The rules see what they guard: each finds a breach planted in code.
#[test]
fn the_rules_see_what_they_guard() {
    let planted = format!(
        "pub struct Big {{\n{}}}\n\nfn long() {{\n{}}}\n\n#[cfg(test)]\nmod tests;\nimpl Other {{\n}}\n",
        (0..13)
            .map(|i| format!("    f{i}: u8,\n"))
            .collect::<String>(),
        "    x();\n".repeat(160),
    );
    let code = without_comments(cut_tests(&planted));
    assert_eq!(struct_fields(&code), vec![("Big".to_owned(), 13)]);
    assert_eq!(functions(&code), vec![("long".to_owned(), 17, 162)]);
    assert_eq!(inherent_impls(&code), vec!["Other".to_owned()]);
    assert!(lines_of_code(&code) > 170);
    // An inline test module is cut; a declared one is not.
    assert!(cut_tests("a\n#[cfg(test)]\nmod tests {\nb").ends_with("a\n"));
    // A loop of two files, through a `use` and a path.
    let a = Source {
        path: "x/src/a.rs".into(),
        crate_dir: "x",
        module: vec!["a".into()],
        code: "use super::b::{B, self};\n".into(),
    };
    let b = Source {
        path: "x/src/b.rs".into(),
        crate_dir: "x",
        module: vec!["b".into()],
        code: "fn f() { crate::a::g(); }\n".into(),
    };
    let na = named_paths(&a, &BTreeSet::new());
    assert!(na.contains(&vec!["b".to_owned(), "B".to_owned()]), "{na:?}");
    let nb = named_paths(&b, &BTreeSet::new());
    assert!(nb.contains(&vec!["a".to_owned(), "g".to_owned()]), "{nb:?}");
    let mut graph = BTreeMap::new();
    graph.insert(
        a.path.clone(),
        BTreeMap::from([(b.path.clone(), BTreeSet::new())]),
    );
    graph.insert(
        b.path.clone(),
        BTreeMap::from([(a.path.clone(), BTreeSet::new())]),
    );
    assert_eq!(circles(&graph), vec![vec![a.path, b.path]]);
}

/// The arms of every `match op {` (and `match op.…`) in `code` that do not
/// name their variant: a catch-all (`_ =>`, or a bare binding like
/// `other =>`) in an op router hides a new op from the compiler.
fn catch_all_op_arms(code: &str) -> Vec<String> {
    let mut found = vec![];
    let mut rest = code;
    while let Some(at) = rest.find("match op") {
        let after = &rest[at..];
        let Some(open) = after.find('{') else { break };
        // The block of arms, to its matching brace.
        let (mut depth, mut end) = (0usize, open);
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let block = &after[open + 1..end];
        // Arms at the block's own depth only.
        let mut depth = 0usize;
        for line in block.lines() {
            let t = line.trim();
            if depth == 0 {
                let head = t.split("=>").next().unwrap_or("").trim();
                let bare = !head.is_empty()
                    && t.contains("=>")
                    && (head == "_" || head.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
                if bare {
                    found.push(t.to_owned());
                }
            }
            depth += line.matches(['{', '(', '[']).count();
            depth = depth.saturating_sub(line.matches(['}', ')', ']']).count());
        }
        rest = &after[end..];
    }
    found
}

/// Point 3's alarm: an op router matches its own enum whole (no arm that
/// swallows ops it does not name), and a request's answer stays typed
/// until the socket's edge (no `serde_json::Value` answer type).
#[test]
fn op_routers_match_their_enums_whole_and_answers_stay_typed() {
    let all = sources();
    let mut report = vec![];
    for s in all
        .iter()
        .filter(|s| s.crate_dir == "node" || s.crate_dir == "cli")
    {
        for arm in catch_all_op_arms(&s.code) {
            report.push(format!(
                "{}: a catch-all arm in an op router: {arm}",
                s.path
            ));
        }
    }
    let api = all
        .iter()
        .find(|s| s.path.ends_with("node/src/api/mod.rs"))
        .expect("the API's root is read");
    assert!(
        api.code
            .contains("pub type Reply = Result<Answer, ApiError>;"),
        "a request's answer inside the daemon is a typed Answer"
    );
    for s in &all {
        if s.code.contains("Result<serde_json::Value, ApiError>") {
            report.push(format!("{}: an answer typed as serde_json::Value", s.path));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
    // The rule sees a catch-all.
    let planted = "fn f(op: Op) { match op {\n Op::A => 1,\n _ => 2,\n } }";
    assert_eq!(catch_all_op_arms(planted), vec!["_ => 2,"]);
    let whole =
        "fn f(op: Op) { match op {\n Op::A(x) => {\n match x { _ => 3 }\n }\n Op::B => 2,\n } }";
    assert!(catch_all_op_arms(whole).is_empty());
}
