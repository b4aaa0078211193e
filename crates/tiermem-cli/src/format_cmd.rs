//! `tiermem format-store DEV`: gives a block device to tiermem.

use clap::Args;
use tiermem_core::DeviceLabel;

/// Write tiermem's header on a block device, so that `--backing DEV` takes it.
///
/// tiermem refuses a block device that carries a filesystem, a partition
/// table, a swap area or any other data, as `swapon` refuses a device
/// without a swap signature: the store would overwrite it. A blank device
/// (all zeros at the start) is taken without formatting. This command
/// marks a device as tiermem's on purpose, with the first 1 MiB holding the
/// header. It refuses a device that is mounted or in use, and one holding
/// data unless --force is given.
///
/// Examples:
///
///   tiermem format-store /dev/nvme1n1
///
///   tiermem format-store --force /dev/loop3
#[derive(Args, Debug)]
pub struct FormatArgs {
    /// The block device to format.
    device: std::path::PathBuf,
    /// Overwrite a filesystem or other data found on the device.
    #[arg(long)]
    force: bool,
}

pub fn run(args: &FormatArgs) -> anyhow::Result<()> {
    let before = tiermem_core::format_device(&args.device, args.force)?;
    let what = match before {
        DeviceLabel::Ours => "it was tiermem's already".to_string(),
        DeviceLabel::Blank => "it was blank".to_string(),
        DeviceLabel::Known(what) => format!("it carried {what}, now overwritten"),
        DeviceLabel::Unknown => "its former data is now overwritten".to_string(),
    };
    println!(
        "{}: formatted as a tiermem backing store ({what}); use it with --backing {}",
        args.device.display(),
        args.device.display()
    );
    Ok(())
}
