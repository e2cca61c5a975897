//! Resident memory of one file mapping, for the tests of the readers' page hints.

/// Resident KiB of the mapping that starts at `base`, from /proc/self/smaps.
pub fn mapping_rss_kib(base: *const u8) -> u64 {
    let base = base as usize;
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut in_mapping = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((lo, _)) = range.split_once('-')
            && let Ok(lo) = usize::from_str_radix(lo, 16)
        {
            in_mapping = lo == base;
            continue;
        }
        if in_mapping && let Some(rest) = line.strip_prefix("Rss:") {
            return rest.trim().trim_end_matches("kB").trim().parse().unwrap();
        }
    }
    panic!("mapping at {base:#x} not found in /proc/self/smaps");
}
