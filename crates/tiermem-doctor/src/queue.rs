//! The device queue behind the backing store (see Stephen Bates, "Linux
//! Optimizations for Low-Latency Block Devices"): scheduler,
//! `io_poll`, `nr_requests` and the driver's poll queues.
//!
//! The store's device number (`st_dev` of a directory or file, `st_rdev`
//! of a device) leads to `/sys/dev/block/MAJ:MIN`; a partition's queue is
//! its disk's. The talk's advice is that polling (and hybrid polling)
//! trades CPU for microseconds on a low-latency device, and that the block
//! layer should add as little as it can to a read. So this check warns
//! only where a setting works against that or against what tiermem was
//! asked to do:
//! - `TIERMEM_IO_POLL=iopoll|hybrid` on a queue without poll queues (the
//!   run falls back to interrupts);
//! - `bfq` on a non-rotational disk: it idles the queue waiting for a
//!   process's next request, adding latency to a lone page read;
//! - `nr_requests` below one handler's queue depth (reads wait for tags).
//!
//! A disk without poll queues passes: interrupts are what the default
//! (`TIERMEM_IO_POLL=none`) expects, and polling is an option, not a need.

use std::path::{Path, PathBuf};

use tiermem_core::io_config::{DEFAULT_IO_DEPTH, ENV_IO_DEPTH, ENV_IO_POLL};
use tiermem_core::PollMode;

use crate::check::Check;
use crate::tree::{Mount, Tree};

const NAME: &str = "device_queue";

/// The driver, where it decides how poll queues are given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Nvme,
    VirtioBlk,
    Other,
}

impl Driver {
    /// The module parameter that gives a driver poll queues.
    fn poll_parameter(self) -> Option<&'static str> {
        match self {
            Driver::Nvme => Some("nvme.poll_queues"),
            Driver::VirtioBlk => Some("virtio_blk.poll_queues"),
            Driver::Other => None,
        }
    }
}

/// What sysfs says about the disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disk {
    pub name: String,
    /// The partition the store is on, if it is on one.
    pub partition: Option<String>,
    pub driver: Option<Driver>,
    /// The active scheduler (`[mq-deadline]` of the list).
    pub scheduler: Option<String>,
    pub io_poll: Option<bool>,
    pub nr_requests: Option<u32>,
    pub rotational: Option<bool>,
    /// The driver's `poll_queues` module parameter.
    pub poll_queues: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueFacts {
    /// The disk, or why none was found.
    pub disk: Result<Disk, String>,
    /// `TIERMEM_IO_POLL` (none by default).
    pub poll: PollMode,
    /// `TIERMEM_IO_DEPTH`: reads one handler keeps in flight.
    pub depth: u32,
}

impl QueueFacts {
    pub fn gather(tree: &Tree, dev: Option<(u32, u32)>, mount: Option<&Mount>) -> QueueFacts {
        QueueFacts {
            disk: find_disk(tree, dev, mount).map(|(node, disk)| read_disk(tree, &node, &disk)),
            poll: std::env::var(ENV_IO_POLL)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(PollMode::None),
            depth: std::env::var(ENV_IO_DEPTH)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_IO_DEPTH),
        }
    }
}

/// The sysfs node of the store's device and of its whole disk.
fn find_disk(
    tree: &Tree,
    dev: Option<(u32, u32)>,
    mount: Option<&Mount>,
) -> Result<(PathBuf, PathBuf), String> {
    let (major, minor) = dev.ok_or("the store's device number is unknown")?;
    let by_number = tree.path(format!("/sys/dev/block/{major}:{minor}"));
    // Filesystems with anonymous device numbers (btrfs) name their disk
    // in the mount table instead.
    let by_source = mount
        .and_then(|m| m.source.strip_prefix("/dev/"))
        .map(|name| tree.path(format!("/sys/class/block/{name}")));
    let node = std::iter::once(by_number)
        .chain(by_source)
        .find_map(|p| p.canonicalize().ok())
        .ok_or_else(|| {
            format!("device {major}:{minor} has no /sys/dev/block entry (tmpfs, overlay or a network filesystem?)")
        })?;
    let disk = match node.join("partition").exists() {
        true => node.parent().map_or(node.clone(), Path::to_path_buf),
        false => node.clone(),
    };
    Ok((node, disk))
}

fn read_disk(tree: &Tree, node: &Path, disk: &Path) -> Disk {
    let file_name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let name = file_name(disk);
    let read = |rel: &str| {
        std::fs::read_to_string(disk.join(rel))
            .ok()
            .map(|s| s.trim().to_string())
    };
    let driver = driver_of(&name, disk);
    let poll_queues = driver
        .and_then(Driver::poll_parameter)
        .and_then(|p| p.split_once('.'))
        .and_then(|(module, param)| {
            tree.read_num(&format!("/sys/module/{module}/parameters/{param}"))
        });
    Disk {
        partition: (node != disk).then(|| file_name(node)),
        driver,
        scheduler: read("queue/scheduler").map(|s| active_scheduler(&s)),
        io_poll: read("queue/io_poll").map(|v| v == "1"),
        nr_requests: read("queue/nr_requests").and_then(|v| v.parse().ok()),
        rotational: read("queue/rotational").map(|v| v == "1"),
        poll_queues,
        name,
    }
}

fn driver_of(name: &str, disk: &Path) -> Option<Driver> {
    if name.starts_with("nvme") {
        return Some(Driver::Nvme);
    }
    if name.starts_with("vd") {
        return Some(Driver::VirtioBlk);
    }
    let link = std::fs::read_link(disk.join("device/driver")).ok()?;
    Some(match link.file_name()?.to_str()? {
        "nvme" => Driver::Nvme,
        "virtio_blk" => Driver::VirtioBlk,
        _ => Driver::Other,
    })
}

/// `none [mq-deadline] kyber bfq` → `mq-deadline`; a lone `none` → `none`.
pub fn active_scheduler(list: &str) -> String {
    match (list.find('['), list.find(']')) {
        (Some(a), Some(b)) if b > a => list[a + 1..b].to_string(),
        _ => list.trim().to_string(),
    }
}

/// One thing the queue does against that advice, and its fix.
struct Problem {
    why: String,
    fix: String,
}

/// The device-queue check (pure).
pub fn check(facts: &QueueFacts) -> Check {
    let disk = match &facts.disk {
        Ok(d) => d,
        Err(why) => {
            return Check::warn(
                NAME,
                format!("not checked: {why}"),
                "give --backing a path on a local disk to have its queue checked",
            )
        }
    };
    let problems = problems(disk, facts);
    let summary = summary(disk);
    if problems.is_empty() {
        return Check::pass(
            NAME,
            format!("{summary}; {}", polling_note(disk, facts.poll)),
        );
    }
    let whys: Vec<&str> = problems.iter().map(|p| p.why.as_str()).collect();
    let fixes: Vec<&str> = problems.iter().map(|p| p.fix.as_str()).collect();
    Check::warn(
        NAME,
        format!("{summary}; {}", whys.join("; ")),
        fixes.join("; "),
    )
}

fn summary(disk: &Disk) -> String {
    let or_unknown = |v: Option<String>| v.unwrap_or_else(|| "unknown".to_string());
    let on = disk
        .partition
        .as_ref()
        .map_or(String::new(), |p| format!(" (partition {p})"));
    let mut parts = vec![
        format!("scheduler {}", or_unknown(disk.scheduler.clone())),
        format!(
            "nr_requests {}",
            or_unknown(disk.nr_requests.map(|n| n.to_string()))
        ),
        format!(
            "io_poll {}",
            or_unknown(disk.io_poll.map(|p| u8::from(p).to_string()))
        ),
    ];
    if let (Some(param), Some(n)) = (
        disk.driver.and_then(Driver::poll_parameter),
        disk.poll_queues,
    ) {
        parts.push(format!("{param}={n}"));
    }
    if disk.rotational == Some(true) {
        parts.push("rotational".to_string());
    }
    format!("{}{on}: {}", disk.name, parts.join(", "))
}

fn problems(disk: &Disk, facts: &QueueFacts) -> Vec<Problem> {
    let mut out = Vec::new();
    let polled = matches!(facts.poll, PollMode::Iopoll | PollMode::Hybrid);
    if polled && disk.io_poll != Some(true) {
        out.push(Problem {
            why: format!(
                "TIERMEM_IO_POLL={} needs poll queues, so reads fall back to interrupts",
                facts.poll.name()
            ),
            fix: match disk.driver.and_then(Driver::poll_parameter) {
                Some(p) => format!("give the driver poll queues ({p}=N on the kernel command line, or when loading the module), or set TIERMEM_IO_POLL=none"),
                None => "set TIERMEM_IO_POLL=none: this device cannot poll".to_string(),
            },
        });
    }
    if disk.scheduler.as_deref() == Some("bfq") && disk.rotational != Some(true) {
        out.push(Problem {
            why: "bfq idles the queue waiting for a process's next request, which delays a lone page read".to_string(),
            fix: format!("as root: echo none > /sys/block/{}/queue/scheduler (or mq-deadline)", disk.name),
        });
    }
    if let Some(n) = disk.nr_requests.filter(|n| *n < facts.depth) {
        out.push(Problem {
            why: format!("nr_requests {n} is below one handler's {} reads in flight (TIERMEM_IO_DEPTH), so reads wait for a tag", facts.depth),
            fix: format!("as root: echo {} > /sys/block/{}/queue/nr_requests", facts.depth.max(64), disk.name),
        });
    }
    out
}

/// What polling means on this queue, for a pass.
fn polling_note(disk: &Disk, poll: PollMode) -> String {
    match (disk.io_poll, poll) {
        (Some(true), PollMode::Iopoll | PollMode::Hybrid) => {
            format!("TIERMEM_IO_POLL={} polls this queue", poll.name())
        }
        (Some(true), _) => "poll queues present: TIERMEM_IO_POLL=iopoll or hybrid may trade CPU for lower read latency".to_string(),
        _ => {
            let how = disk
                .driver
                .and_then(Driver::poll_parameter)
                .map_or(String::new(), |p| format!(" ({p} > 0 would allow it)"));
            format!("no poll queues: reads complete by interrupt, as TIERMEM_IO_POLL={} expects; polling is optional{how}", poll.name())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    fn vda() -> Disk {
        Disk {
            name: "vda".into(),
            partition: None,
            driver: Some(Driver::VirtioBlk),
            scheduler: Some("mq-deadline".into()),
            io_poll: Some(false),
            nr_requests: Some(256),
            rotational: Some(true),
            poll_queues: Some(0),
        }
    }

    fn facts(disk: Disk, poll: PollMode) -> QueueFacts {
        QueueFacts {
            disk: Ok(disk),
            poll,
            depth: 32,
        }
    }

    #[test]
    fn a_virtio_disk_without_poll_queues_passes_and_says_so() {
        let c = check(&facts(vda(), PollMode::None));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.detail.contains(
                "vda: scheduler mq-deadline, nr_requests 256, io_poll 0, virtio_blk.poll_queues=0"
            ),
            "{c:?}"
        );
        assert!(c.detail.contains("no poll queues"), "{c:?}");
    }

    #[test]
    fn asking_for_polling_without_poll_queues_warns() {
        let c = check(&facts(vda(), PollMode::Iopoll));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.fix.expect("a fix").contains("virtio_blk.poll_queues=N"));
        let mut nvme = vda();
        nvme.name = "nvme0n1".into();
        nvme.driver = Some(Driver::Nvme);
        nvme.io_poll = Some(true);
        assert_eq!(check(&facts(nvme, PollMode::Hybrid)).status, Status::Pass);
    }

    #[test]
    fn bfq_on_a_flash_disk_warns() {
        let mut d = vda();
        d.scheduler = Some("bfq".into());
        d.rotational = Some(false);
        let c = check(&facts(d.clone(), PollMode::None));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c
            .fix
            .expect("a fix")
            .contains("/sys/block/vda/queue/scheduler"));
        d.rotational = Some(true);
        assert_eq!(check(&facts(d, PollMode::None)).status, Status::Pass);
    }

    #[test]
    fn a_short_request_queue_warns() {
        let mut d = vda();
        d.nr_requests = Some(16);
        let c = check(&facts(d, PollMode::None));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("nr_requests 16 is below"), "{c:?}");
    }

    #[test]
    fn no_disk_warns_that_it_was_not_checked() {
        let f = QueueFacts {
            disk: Err("device 0:40 has no /sys/dev/block entry".into()),
            poll: PollMode::None,
            depth: 32,
        };
        let c = check(&f);
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.starts_with("not checked"), "{c:?}");
    }

    #[test]
    fn the_active_scheduler_is_the_bracketed_one() {
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq"),
            "mq-deadline"
        );
        assert_eq!(active_scheduler("none"), "none");
        assert_eq!(active_scheduler("[none] mq-deadline"), "none");
    }

    #[test]
    fn a_partition_leads_to_its_disk() {
        let root = tempfile::tempdir().expect("a temp dir");
        let disk = root.path().join("sys/devices/pci0/nvme0n1");
        let write = |rel: &str, text: &str| {
            let p = disk.join(rel);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("dirs");
            std::fs::write(p, text).expect("a file");
        };
        write("nvme0n1p2/partition", "2\n");
        write("queue/scheduler", "[none] mq-deadline\n");
        write("queue/io_poll", "1\n");
        write("queue/nr_requests", "1023\n");
        let links = root.path().join("sys/dev/block");
        std::fs::create_dir_all(&links).expect("dirs");
        std::os::unix::fs::symlink("../../devices/pci0/nvme0n1/nvme0n1p2", links.join("259:2"))
            .expect("a link");
        let params = root.path().join("sys/module/nvme/parameters");
        std::fs::create_dir_all(&params).expect("dirs");
        std::fs::write(params.join("poll_queues"), "4\n").expect("a file");
        let tree = Tree::new(root.path());
        let f = QueueFacts::gather(&tree, Some((259, 2)), None);
        let d = f.disk.expect("found");
        assert_eq!(d.name, "nvme0n1");
        assert_eq!(d.partition.as_deref(), Some("nvme0n1p2"));
        assert_eq!(d.driver, Some(Driver::Nvme));
        assert_eq!(d.scheduler.as_deref(), Some("none"));
        assert_eq!(
            (d.io_poll, d.nr_requests, d.poll_queues),
            (Some(true), Some(1023), Some(4))
        );
    }
}
