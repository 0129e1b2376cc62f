//! A child's CPU time and resident set, from Linux's `/proc`.

use std::process::Command;

/// Clock ticks per second (`getconf CLK_TCK`, 100 where that fails).
pub fn clock_ticks_per_sec() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Fields of `/proc/<pid>/stat` after the command name: index 0 is field 3 (`state`).
fn stat_fields(pid: &str) -> Result<Vec<u64>, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("reading /proc/{pid}/stat: {e}"))?;
    let (_, rest) = text.rsplit_once(')').ok_or("malformed stat")?;
    Ok(rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect())
}

/// utime + stime of a live process, in ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let f = stat_fields(&pid.to_string())?;
    Ok(f[11] + f[12])
}

/// cutime + cstime of this process: the CPU of every reaped child, in ticks.
pub fn children_cpu_ticks() -> Result<u64, String> {
    let f = stat_fields("self")?;
    Ok(f[13] + f[14])
}

/// A process's peak resident set in KiB (`VmHWM`) and its current one (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// Resets a process's peak resident set (Linux `clear_refs` 5), so [`rss_kib`] reads the peak
/// from now on; false where the kernel does not offer it.
pub fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let (peak, now) = rss_kib(me).expect("/proc/self/status");
        assert!(peak >= now && now > 0, "peak {peak} now {now}");
        // Burn a little CPU so the reading is of a live, counted process.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_ticks(me).is_ok());
        assert!(children_cpu_ticks().is_ok());
    }
}
