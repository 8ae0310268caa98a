//! The one glob of Leo: `*` matches any run of characters (including none), `?` exactly one.
//!
//! It decides which agents a registration's `agents` offers a group to, which agents an API
//! client's `can_message` may write to, and which harness a capability-table row names (that
//! one case-insensitively). The matcher is iterative with one backtrack point: linear in
//! practice, no recursion, no allocation for the case-sensitive form.

/// True when `name` matches `pattern`.
pub fn matches(pattern: &str, name: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut si) = (0, 0);
    // The last `*` seen, and where in `name` its run currently ends.
    let mut star: Option<usize> = None;
    let mut mark = 0;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if pi < p.len() && p[pi] == b'?' {
            pi += 1;
            si += char_len(s, si);
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += char_len(s, mark);
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// `matches` with both sides lower-cased.
pub fn matches_ignore_case(pattern: &str, name: &str) -> bool {
    matches(&pattern.to_lowercase(), &name.to_lowercase())
}

/// True when `name` matches any of `patterns`.
pub fn any_matches(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| matches(p, name))
}

/// The length of the UTF-8 character starting at `s[i]` (`i` is always on a boundary).
fn char_len(s: &[u8], i: usize) -> usize {
    match s[i] {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_and_marks() {
        for (p, s, ok) in [
            ("scout-*", "scout-1", true),
            ("scout-*", "scout-", true),
            ("scout-*", "scou", false),
            ("scout-???", "scout-abc", true),
            ("scout-???", "scout-ab", false),
            ("*", "", true),
            ("*", "anything", true),
            ("x", "", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("*code*", "visual studio code", true),
            ("claude-code", "claude-code-x", false),
            ("*a", "*b a", true),
            ("?", "é", true),
            ("*é?", "xxéé", true),
            ("Case", "case", false),
        ] {
            assert_eq!(matches(p, s), ok, "{p:?} ~ {s:?}");
        }
        assert!(matches_ignore_case("Claude-Code", "claude-CODE"));
        let pats = ["rocket".to_owned(), "scout-*".to_owned(), "a?c".to_owned()];
        for (t, ok) in [
            ("rocket", true),
            ("rockets", false),
            ("scout-1", true),
            ("scout", false),
            ("abc", true),
            ("abbc", false),
            ("olympus", false),
        ] {
            assert_eq!(any_matches(&pats, t), ok, "{t}");
        }
        assert!(!any_matches(&[], "bee"));
    }
}
