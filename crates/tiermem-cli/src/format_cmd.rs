//! `tiermem format-store DEV|FILE`: gives a block device or a fixed-size
//! file to tiermem.

use clap::Args;
use tiermem_core::StoreLabel;

/// Write tiermem's header on a block device or file, so that `--backing`
/// takes it.
///
/// tiermem refuses a block device that carries a filesystem, a partition
/// table, a swap area or any other data, as `swapon` refuses a device
/// without a swap signature: the store would overwrite it. A blank device
/// (all zeros at the start) is taken without formatting. A regular file is
/// taken when it is empty (tiermem grows it) and refused when it holds
/// anything.
///
/// This command marks a device or a file as tiermem's on purpose: the first
/// 1 MiB holds the header, the pages follow, and the store keeps the size
/// it finds. Format a file that cannot be emptied or grown, such as the
/// file `nbdfuse` exports for a remote disk. The command refuses a device
/// that is mounted or in use, a file that is not the user's own or that
/// other users can read, a symbolic link to a file, and anything holding
/// data unless --force is given.
///
/// Examples:
///
///   tiermem format-store /dev/nvme1n1
///
///   tiermem format-store --force /dev/loop3
///
///   tiermem format-store /mnt/nbd/disk
#[derive(Args, Debug)]
pub struct FormatArgs {
    /// The block device or regular file to format.
    device: std::path::PathBuf,
    /// Overwrite a filesystem or other data found on the device.
    #[arg(long)]
    force: bool,
}

pub fn run(args: &FormatArgs) -> anyhow::Result<()> {
    let before = tiermem_core::format_store(&args.device, args.force)?;
    let what = match before {
        StoreLabel::Ours => "it was tiermem's already".to_string(),
        StoreLabel::Blank => "it was blank".to_string(),
        StoreLabel::Known(what) => format!("it carried {what}, now overwritten"),
        StoreLabel::Unknown => "its former data is now overwritten".to_string(),
    };
    println!(
        "{}: formatted as a tiermem backing store ({what}); use it with --backing {}",
        args.device.display(),
        args.device.display()
    );
    Ok(())
}
