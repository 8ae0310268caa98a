//! What a call to a tool nobody serves is told: the closest served name, if one is close, and
//! the names that are served, so an agent (or a person at `leo call`) can correct a typo
//! without asking twice. Only names the caller may call are ever passed in, so a tool denied
//! to the agent, or registered for other agents only, is never revealed here.

/// How many served names the message lists at most.
pub const MAX_LISTED: usize = 20;

/// `no connected app serves tool "x" (did you mean "y"?); tools served now: a, b, y`.
pub fn no_such_tool(tool: &str, served: &[String]) -> String {
    // `UNSERVED` starts it: callers that ride through a takeover read it (see there).
    let mut text = format!("{}{tool:?}", leo_protocol::codes::UNSERVED);
    if served.is_empty() {
        text.push_str("; no app serves any tool now");
        return text;
    }
    if let Some(near) = closest(tool, served) {
        text.push_str(&format!(" (did you mean {near:?}?)"));
    }
    let listed: Vec<&str> = served.iter().take(MAX_LISTED).map(String::as_str).collect();
    text.push_str(&format!("; tools served now: {}", listed.join(", ")));
    if served.len() > MAX_LISTED {
        text.push_str(&format!(" … and {} more", served.len() - MAX_LISTED));
    }
    text
}

/// The served name nearest to `tool` (without case), if it is near enough to be a typo: at
/// most a third of the longer name's characters apart, and at least 1 or 2 for short names.
pub fn closest<'a>(tool: &str, served: &'a [String]) -> Option<&'a str> {
    let want = tool.to_lowercase();
    served
        .iter()
        .map(|name| (distance(&want, &name.to_lowercase()), name))
        .filter(|(d, name)| {
            let longer = want.chars().count().max(name.chars().count());
            *d <= (longer / 3).max(2).min(longer.saturating_sub(1))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name.as_str())
}

/// Edit distance counting an insertion, a deletion, a substitution or a swap of two neighbours
/// as one (optimal string alignment).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: the distance between a[..i] and b[..j]; names are at most 64 characters.
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn typos_find_their_tool() {
        let served = names(&["read_clipboard", "take_photo", "write_file"]);
        assert_eq!(closest("read_clipbaord", &served), Some("read_clipboard"));
        assert_eq!(closest("READ_CLIPBOARD", &served), Some("read_clipboard"));
        assert_eq!(closest("take_phot", &served), Some("take_photo"));
        assert_eq!(closest("write", &served), None, "too far to be a typo");
        assert_eq!(closest("deploy", &served), None);
        assert_eq!(closest("ab", &names(&["xy"])), None, "2 of 2 is not a typo");
        assert_eq!(distance("abcd", "abdc"), 1, "a swap is one edit");
        assert_eq!(distance("", "abc"), 3);
    }

    #[test]
    fn the_message_suggests_and_lists_a_bounded_number() {
        let served = names(&["read_clipboard", "write_file"]);
        assert_eq!(
            no_such_tool("read_clipbaord", &served),
            "no connected app serves tool \"read_clipbaord\" (did you mean \"read_clipboard\"?); \
             tools served now: read_clipboard, write_file"
        );
        assert_eq!(
            no_such_tool("zzz", &[]),
            "no connected app serves tool \"zzz\"; no app serves any tool now"
        );
        let many: Vec<String> = (0..25).map(|i| format!("tool_{i:02}")).collect();
        let text = no_such_tool("nothing_like_it", &many);
        assert!(!text.contains("did you mean"), "{text}");
        assert!(text.ends_with("tool_19 … and 5 more"), "{text}");
    }
}
