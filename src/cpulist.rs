//! CPU lists in the kernel's text form ("0-3,8,10-11"), as sysfs prints them
//! and as operators type them into the `housekeeping_cpus` knob.

use std::collections::BTreeSet;
use std::fmt;

/// A set of CPU ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuList(BTreeSet<u32>);

impl CpuList {
    pub fn new() -> Self {
        Self::default()
    }

    /// CPUs `0..n`.
    pub fn first(n: u32) -> Self {
        Self((0..n).collect())
    }

    /// Parses "0-3,8", "", " 5 " and the like. Every CPU must be below
    /// `nr_cpus`; ranges must go up; no other characters are accepted.
    pub fn parse(text: &str, nr_cpus: u32) -> Result<Self, String> {
        let text = text.trim();
        let mut set = BTreeSet::new();
        if text.is_empty() {
            return Ok(Self(set));
        }
        for part in text.split(',') {
            let part = part.trim();
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (parse_cpu(a)?, parse_cpu(b)?),
                None => {
                    let c = parse_cpu(part)?;
                    (c, c)
                }
            };
            if lo > hi {
                return Err(format!("CPU range {part:?} goes down"));
            }
            if hi >= nr_cpus {
                return Err(format!(
                    "CPU {hi} does not exist (this node has CPUs 0-{})",
                    nr_cpus.saturating_sub(1)
                ));
            }
            set.extend(lo..=hi);
        }
        Ok(Self(set))
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// The CPUs of `self` not in `other`.
    pub fn minus(&self, other: &CpuList) -> CpuList {
        Self(self.0.difference(&other.0).copied().collect())
    }

    /// The CPUs of both.
    pub fn intersects(&self, other: &CpuList) -> bool {
        self.0.intersection(&other.0).next().is_some()
    }

    /// As 64-bit words, CPU c at bit c % 64 of word c / 64.
    pub fn to_words<const N: usize>(&self) -> [u64; N] {
        let mut words = [0u64; N];
        for c in self.iter() {
            if let Some(w) = words.get_mut(c as usize / 64) {
                *w |= 1 << (c % 64);
            }
        }
        words
    }
}

impl FromIterator<u32> for CpuList {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

fn parse_cpu(s: &str) -> Result<u32, String> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a CPU number"));
    }
    s.parse().map_err(|_| format!("{s:?} is not a CPU number"))
}

/// Prints the shortest kernel form: consecutive CPUs become ranges.
impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(lo) = iter.next() {
            let mut hi = lo;
            while iter.peek() == Some(&(hi + 1)) {
                hi = iter.next().unwrap();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_kernel_forms() {
        let l = CpuList::parse("0-2,5", 8).unwrap();
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![0, 1, 2, 5]);
        assert!(CpuList::parse("", 8).unwrap().is_empty());
        assert_eq!(CpuList::parse(" 3 \n", 8).unwrap().to_string(), "3");
    }

    #[test]
    fn refuses_what_is_not_a_cpu_list() {
        for bad in ["abc", "1-", "-1", "3-1", "8", "0,,1", "1.5", "0-99"] {
            assert!(CpuList::parse(bad, 8).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn prints_ranges() {
        let l: CpuList = [0, 1, 2, 4, 6, 7].into_iter().collect();
        assert_eq!(l.to_string(), "0-2,4,6-7");
    }

    #[test]
    fn words_put_each_cpu_at_its_bit() {
        let l: CpuList = [0, 63, 64, 130].into_iter().collect();
        let w: [u64; 4] = l.to_words();
        assert_eq!(w, [1 | 1 << 63, 1, 1 << 2, 0]);
    }

    proptest! {
        #[test]
        fn printing_then_parsing_gives_the_same_set(cpus in proptest::collection::btree_set(0u32..256, 0..40)) {
            let l = CpuList(cpus);
            prop_assert_eq!(CpuList::parse(&l.to_string(), 256).unwrap(), l);
        }

        #[test]
        fn parsing_never_panics(s in "\\PC{0,20}") {
            let _ = CpuList::parse(&s, 16);
        }
    }
}
