//! Redis's glob patterns for `KEYS` and `SCAN MATCH`: `*` any run, `?`
//! one byte, `[abc]`, `[^a]`, `[a-z]` classes, `\x` a literal `x`. Pure;
//! the match is on bytes, as Redis's `stringmatchlen` is.

/// Whether `s` matches `pattern`.
pub fn matches(pattern: &[u8], s: &[u8]) -> bool {
    // Backtracking over the last `*` only: linear in practice, and no
    // pattern can make it exponential.
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, i));
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((hit, next)) = class(pattern, p, s[i]) {
                        if hit {
                            p = next;
                            i += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == s[i] {
                        p += 2;
                        i += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[i] {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Whether `c` is in the class starting at `pattern[at] == b'['`, and
/// where the pattern goes on after it. An unterminated class runs to the
/// end of the pattern, as in Redis.
fn class(pattern: &[u8], at: usize, c: u8) -> Option<(bool, usize)> {
    let mut p = at + 1;
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut hit = false;
    loop {
        match pattern.get(p) {
            None => break,
            Some(b']') => {
                p += 1;
                break;
            }
            Some(b'\\') if p + 1 < pattern.len() => {
                hit |= pattern[p + 1] == c;
                p += 2;
            }
            Some(&lo)
                if pattern.get(p + 1) == Some(&b'-')
                    && p + 2 < pattern.len()
                    && pattern[p + 2] != b']' =>
            {
                let hi = pattern[p + 2];
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                hit |= (lo..=hi).contains(&c);
                p += 3;
            }
            Some(&x) => {
                hit |= x == c;
                p += 1;
            }
        }
    }
    Some((hit != negate, p))
}

/// The literal bytes every match starts with (a `SCAN`/`KEYS` over a
/// pattern reads only the keys with that prefix).
pub fn literal_prefix(pattern: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < pattern.len() {
        match pattern[p] {
            b'*' | b'?' | b'[' => break,
            b'\\' if p + 1 < pattern.len() => {
                out.push(pattern[p + 1]);
                p += 2;
            }
            c => {
                out.push(c);
                p += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_examples() {
        let m = |p: &str, s: &str| matches(p.as_bytes(), s.as_bytes());
        assert!(m("h?llo", "hello") && m("h?llo", "hallo") && !m("h?llo", "hllo"));
        assert!(m("h*llo", "hllo") && m("h*llo", "heeeello"));
        assert!(m("h[ae]llo", "hello") && !m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo") && !m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo") && !m("h[a-b]llo", "hcllo"));
        assert!(m("*", "") && m("*", "anything") && m("a*b*c", "aXXbYYc") && !m("a*b*c", "aXXbYY"));
        assert!(m("h\\*llo", "h*llo") && !m("h\\*llo", "hello"));
        assert!(m("user:*", "user:1") && !m("user:*", "users"));
    }

    #[test]
    fn prefixes() {
        assert_eq!(literal_prefix(b"user:*"), b"user:");
        assert_eq!(literal_prefix(b"a\\*b?"), b"a*b");
        assert_eq!(literal_prefix(b"*x"), b"");
    }
}
