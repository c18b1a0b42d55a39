//! `flashtree info`: the GPU found (or "no CUDA driver: CPU only") and, with `--bench`, the
//! measured device-to-device copy bandwidth.

use clap::Args;

use crate::gpu::{bandwidth, info::DeviceInfo, Gpu, GpuError};

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Also measure the device-to-device copy bandwidth (the ceiling benches are reported against).
    #[arg(long)]
    pub bench: bool,
    /// Size of each copy buffer in GiB for --bench (read + write counted).
    #[arg(long, default_value_t = 4.0, value_parser = parse_gib)]
    pub copy_gib: f64,
    /// Print `copy_gbps=<value>` only (for scripts).
    #[arg(long)]
    pub quiet: bool,
}

fn parse_gib(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number of GiB"))?;
    if !(v > 0.0 && v <= 64.0) {
        return Err(format!("--copy-gib must be in (0, 64], got {v}"));
    }
    Ok(v)
}

pub fn run(args: &InfoArgs) -> anyhow::Result<()> {
    println!("flashtree {}", env!("CARGO_PKG_VERSION"));
    let gpu = match Gpu::try_new() {
        Ok(g) => g,
        Err(GpuError::NoDriver) => {
            println!("no CUDA driver: CPU only");
            if args.bench {
                anyhow::bail!("--bench needs a GPU");
            }
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let info = DeviceInfo::query(&gpu)?;
    if !args.quiet {
        println!("{info}");
    }
    if args.bench {
        let bytes = (args.copy_gib * (1u64 << 30) as f64) as usize;
        let bw = bandwidth::measure_copy(&gpu, bytes, 10)?;
        if args.quiet {
            println!("copy_gbps={:.1}", bw.ceiling_gbps());
        } else {
            println!(
                "copy bandwidth: {:.1} GB/s (cuMemcpyDtoD {:.1} GB/s, copy_v4 kernel {:.1} GB/s; {:.2} GiB → {:.2} GiB, read + write counted)",
                bw.ceiling_gbps(),
                bw.driver_gbps,
                bw.kernel_gbps,
                args.copy_gib,
                args.copy_gib
            );
        }
    }
    Ok(())
}
