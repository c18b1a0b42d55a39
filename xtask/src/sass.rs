//! `sass [--arch sm_90a] [--features F] [--loops] [KERNEL…]`: the static instruction census of the
//! kernels' machine code — what a kernel's hot loop spends its issue slots on, without a GPU.
//!
//! Builds the PTX (`ptx::build`), assembles it with `ptxas` (as `--ptxas` does) and disassembles the
//! cubin with `nvdisasm -c` (PyPI `nvidia-cuda-nvdisasm`; found at `$NVDISASM`, in `.venv`, or on
//! `PATH`). For each kernel whose name starts with one of the `KERNEL` prefixes (all kernels when
//! none is given) it prints the total instruction count and its **hot loop**: of the loops (a label
//! and a later branch back to it), the one with the most tensor-core instructions, the smallest of
//! those on a tie — the loop that streams the operands; where no loop has a tensor instruction,
//! the one with the most instructions. The loop's instructions are grouped by what they cost: the
//! tensor products, the ALU work that turns packed weights into operands (`LOP3`, `SHF`, `PRMT`,
//! packed-half arithmetic, conversions), f32/f64 arithmetic, integer and address arithmetic, uniform
//! datapath instructions (descriptors, loop counters), moves, memory, synchronisation and control.
//! Every class takes issue slots: at one instruction per scheduler per cycle, a loop of `I`
//! instructions that consumes `B` bytes of weights per warp caps the weight stream at
//! `B/I · (schedulers × clock)` bytes per second — on nvidia-h200 (132 SMs × 4 × 1.98 GHz) 1.045·10¹²
//! warp instructions per second, so `I/B` must stay under 0.243 to keep up with 4.3 TB/s.
//!
//! `ptxas`'s C7514 remarks (warpgroup products serialized because another instruction reads
//! their accumulators inside a pipeline stage) are listed per kernel.
//!
//! With `--loops` every loop of every selected kernel is listed, not only the hot one. The table
//! is also written to `target/sass/census<+features>.tsv`, to diff two builds.

use std::collections::BTreeMap;
use std::process::Command;

use crate::{ptx, ptxas, workspace_root};

/// Options of `cargo xtask sass`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SassOptions {
    pub arch: String,
    pub features: String,
    pub all_loops: bool,
    pub kernels: Vec<String>,
}

impl SassOptions {
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut o = SassOptions { arch: "sm_90a".into(), ..Default::default() };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--arch" => o.arch = it.next().ok_or("--arch needs a value")?.clone(),
                "--features" => o.features = it.next().ok_or("--features needs a feature list")?.clone(),
                "--loops" => o.all_loops = true,
                s if s.starts_with('-') => return Err(format!("sass: unknown option `{s}`")),
                k => o.kernels.push(k.to_string()),
            }
        }
        Ok(o)
    }
}

/// One disassembled instruction: byte offset in its function and its text without the predicate
/// guard (`@P0 ` / `@!UP1 `) and the trailing `;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instr {
    pub offset: u32,
    pub text: String,
}

impl Instr {
    /// The opcode with its modifiers, e.g. `HGMMA.64x24x16.F32`.
    pub fn opcode(&self) -> &str {
        self.text.split_whitespace().next().unwrap_or("")
    }

    /// The opcode's base name, e.g. `HGMMA`.
    pub fn base(&self) -> &str {
        self.opcode().split('.').next().unwrap_or("")
    }
}

/// One function of the disassembly: its instructions and its labels' offsets.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub instrs: Vec<Instr>,
    pub labels: BTreeMap<String, u32>,
}

/// A loop: the instructions at offsets `start ..= end` (a label and the last branch back to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loop {
    pub start: u32,
    pub end: u32,
}

/// What an instruction costs, by the unit or the purpose it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Tensor,
    Unpack,
    Float,
    Integer,
    Uniform,
    Move,
    Memory,
    Sync,
    Control,
    Other,
}

impl Class {
    pub const ALL: [Class; 10] = [
        Class::Tensor,
        Class::Unpack,
        Class::Float,
        Class::Integer,
        Class::Uniform,
        Class::Move,
        Class::Memory,
        Class::Sync,
        Class::Control,
        Class::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Class::Tensor => "tensor",
            Class::Unpack => "unpack",
            Class::Float => "fp",
            Class::Integer => "int",
            Class::Uniform => "uniform",
            Class::Move => "move",
            Class::Memory => "mem",
            Class::Sync => "sync",
            Class::Control => "control",
            Class::Other => "other",
        }
    }

    /// The class of one instruction.
    pub fn of(i: &Instr) -> Class {
        let op = i.opcode();
        let base = i.base();
        match base {
            "HGMMA" | "HMMA" | "IMMA" | "IGMMA" | "QGMMA" | "BGMMA" | "DMMA" => Class::Tensor,
            "LOP3" | "SHF" | "PRMT" | "HFMA2" | "HADD2" | "HMUL2" | "HMNMX2" | "I2F" | "F2I" | "F2F" | "I2FP"
            | "F2FP" | "BMSK" | "BFE" | "BFI" | "SGXT" | "POPC" | "FLO" | "BREV" => Class::Unpack,
            "FFMA" | "FADD" | "FMUL" | "FMNMX" | "MUFU" | "FSETP" | "FSEL" | "FCHK" | "FMNMX3" | "FRND" | "DFMA"
            | "DADD" | "DMUL" | "DSETP" | "DMNMX" => Class::Float,
            "MOV" | "CS2R" | "S2R" | "SHFL" | "P2R" | "R2P" => Class::Move,
            "IMAD" if op.starts_with("IMAD.MOV") => Class::Move,
            "IMAD" | "IADD3" | "IADD" | "LEA" | "ISETP" | "VIADD" | "VIADDMNMX" | "SEL" | "IMNMX" | "IABS"
            | "VIMNMX" | "VIMNMX3" | "IMUL" => Class::Integer,
            "LDG" | "STG" | "LDS" | "STS" | "LDSM" | "STSM" | "LD" | "ST" | "LDC" | "LDGSTS" | "LDGDEPBAR"
            | "ATOMG" | "ATOMS" | "ATOM" | "RED" | "UBLKCP" | "UTMALDG" | "UTMASTG" | "UBLKPF" | "CCTL" | "ULDC" => {
                Class::Memory
            }
            "BAR" | "WARPGROUP" | "SYNCS" | "DEPBAR" | "WARPSYNC" | "MEMBAR" | "FENCE" | "ERRBAR" | "CGAERRBAR"
            | "ARRIVES" | "VOTE" | "VOTEU" | "REDUX" | "MATCH" => Class::Sync,
            "BRA" | "EXIT" | "BSSY" | "BSYNC" | "RET" | "CALL" | "PLOP3" | "ELECT" | "NOP" | "YIELD" | "PREEXIT"
            | "ACQBULK" | "BMOV" | "JMP" | "BREAK" | "BPT" | "ENDCOLLECTIVE" => Class::Control,
            b if b.starts_with('U') || b == "R2UR" || b == "S2UR" => Class::Uniform,
            _ => Class::Other,
        }
    }
}

/// Parses `nvdisasm -c` output into functions (the `.text.<name>:` sections).
pub fn parse_disassembly(text: &str) -> Vec<Function> {
    let mut out: Vec<Function> = Vec::new();
    let mut pending_labels: Vec<String> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(name) = l.strip_prefix(".text.").and_then(|s| s.strip_suffix(':')) {
            out.push(Function { name: name.to_string(), ..Default::default() });
            pending_labels.clear();
            continue;
        }
        let Some(f) = out.last_mut() else { continue };
        if let Some(label) = l.strip_suffix(':') {
            if label.starts_with(".L") {
                pending_labels.push(label.to_string());
            }
            continue;
        }
        // `/*0080*/  @P0 EXIT ;`
        let Some(rest) = l.strip_prefix("/*") else { continue };
        let Some((hex, body)) = rest.split_once("*/") else { continue };
        let Ok(offset) = u32::from_str_radix(hex.trim(), 16) else { continue };
        let body = body.trim().trim_end_matches(';').trim();
        let body = match body.strip_prefix('@') {
            Some(guarded) => guarded.split_once(char::is_whitespace).map_or("", |(_, t)| t.trim()),
            None => body,
        };
        for label in pending_labels.drain(..) {
            f.labels.insert(label, offset);
        }
        f.instrs.push(Instr { offset, text: body.to_string() });
    }
    out
}

/// The function's loops: for each label, from it to the last branch back to it.
pub fn loops(f: &Function) -> Vec<Loop> {
    let mut ends: BTreeMap<u32, u32> = BTreeMap::new();
    for i in &f.instrs {
        if i.base() != "BRA" {
            continue;
        }
        // `BRA `(.L_x_12)` or `BRA.U.ANY `(.L_x_12)`.
        let Some(target) = i.text.split("(").nth(1).and_then(|s| s.split(')').next()) else { continue };
        let Some(&start) = f.labels.get(target.trim()) else { continue };
        if start <= i.offset {
            let e = ends.entry(start).or_insert(i.offset);
            *e = (*e).max(i.offset);
        }
    }
    ends.into_iter().map(|(start, end)| Loop { start, end }).collect()
}

/// The instructions of `l`.
pub fn body<'a>(f: &'a Function, l: &Loop) -> impl Iterator<Item = &'a Instr> {
    let (s, e) = (l.start, l.end);
    f.instrs.iter().filter(move |i| i.offset >= s && i.offset <= e)
}

/// Instructions per class in `instrs`.
pub fn census<'a>(instrs: impl Iterator<Item = &'a Instr>) -> BTreeMap<Class, u32> {
    let mut c = BTreeMap::new();
    for i in instrs {
        *c.entry(Class::of(i)).or_insert(0) += 1;
    }
    c
}

/// The hot loop (see the module doc), if the function has a loop.
pub fn hot_loop(f: &Function) -> Option<Loop> {
    let ls = loops(f);
    let tensor = |l: &Loop| body(f, l).filter(|i| Class::of(i) == Class::Tensor).count();
    let size = |l: &Loop| body(f, l).count();
    let best_tensor = ls.iter().map(tensor).max()?;
    if best_tensor > 0 {
        ls.iter().filter(|l| tensor(l) == best_tensor).min_by_key(|l| size(l)).copied()
    } else {
        ls.iter().max_by_key(|l| size(l)).copied()
    }
}

fn row(name: &str, total: usize, l: Option<Loop>, f: &Function, serialized: bool) -> String {
    let mut cols = vec![name.to_string(), total.to_string()];
    match l {
        Some(l) => {
            let c = census(body(f, &l));
            cols.push(format!("{:#x}-{:#x}", l.start, l.end));
            cols.push(c.values().sum::<u32>().to_string());
            cols.extend(Class::ALL.iter().map(|k| c.get(k).copied().unwrap_or(0).to_string()));
        }
        None => {
            cols.push("-".into());
            cols.push("0".into());
            cols.extend(Class::ALL.iter().map(|_| "0".to_string()));
        }
    }
    cols.push(if serialized { "serialized" } else { "" }.to_string());
    cols.join("\t")
}

/// Runs the census (see the module doc).
pub fn run(args: &[String]) -> Result<(), String> {
    let o = SassOptions::parse(args)?;
    let ptx_path = ptx::build(&ptx::PtxOptions { arch: o.arch.clone(), ptxas: false, features: o.features.clone() })?;
    let (cubin, log) = ptxas::assemble(&ptx_path, &o.arch)?;
    let nvdisasm =
        ptxas::find_cuda_tool("NVDISASM", "nvdisasm", "`.venv/bin/pip install 'nvidia-cuda-nvdisasm==13.2.86'`")?;
    let dis = Command::new(&nvdisasm)
        .arg("-c")
        .arg(&cubin)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", nvdisasm.display()))?;
    if !dis.status.success() {
        return Err(format!("nvdisasm failed on {}: {}", cubin.display(), String::from_utf8_lossy(&dis.stderr)));
    }
    let functions = parse_disassembly(&String::from_utf8_lossy(&dis.stdout));
    let serialized = ptxas::serialized_kernels(&log);
    let selected: Vec<&Function> = functions
        .iter()
        .filter(|f| o.kernels.is_empty() || o.kernels.iter().any(|k| f.name.starts_with(k.as_str())))
        .collect();
    if selected.is_empty() {
        return Err(format!("no kernel of {} starts with {:?}", cubin.display(), o.kernels));
    }
    let mut header = vec!["kernel", "instrs", "loop", "loop-instrs"];
    header.extend(Class::ALL.iter().map(|c| c.name()));
    header.push("ptxas");
    let mut lines = vec![header.join("\t")];
    for f in &selected {
        let is_serialized = serialized.iter().any(|s| s == &f.name);
        if o.all_loops {
            for l in loops(f) {
                lines.push(row(&f.name, f.instrs.len(), Some(l), f, is_serialized));
            }
        } else {
            lines.push(row(&f.name, f.instrs.len(), hot_loop(f), f, is_serialized));
        }
    }
    let table = lines.join("\n") + "\n";
    print_aligned(&table);
    let suffix = if o.features.is_empty() { String::new() } else { format!("+{}", o.features.replace(',', "+")) };
    let dir = workspace_root().join("target/sass");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let tsv = dir.join(format!("census{suffix}.tsv"));
    std::fs::write(&tsv, &table).map_err(|e| format!("writing {}: {e}", tsv.display()))?;
    eprintln!("xtask: wrote {}", tsv.display());
    Ok(())
}

fn print_aligned(tsv: &str) {
    let rows: Vec<Vec<&str>> = tsv.lines().map(|l| l.split('\t').collect()).collect();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..cols).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.len()).max().unwrap_or(0)).collect();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| if c == 0 { format!("{s:<w$}", w = widths[c]) } else { format!("{s:>w$}", w = widths[c]) })
            .collect();
        println!("{}", cells.join(" "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shortened `nvdisasm -c` listing: a prologue, an outer loop with a tensor product and an
    /// inner copy loop, and a second function without loops.
    const LISTING: &str = "\t.target\tsm_90a\n\
//--------------------- .text.qmm_demo --------------------------\n\
\t.section\t.text.qmm_demo,\"ax\",@progbits\n\
qmm_demo:\n\
.text.qmm_demo:\n\
        /*0000*/                   LDC R1, c[0x0][0x28] ;\n\
.L_x_1:\n\
        /*0010*/                   LOP3.LUT R4, R5, 0xf000f, R6, 0xf8, !PT ;\n\
        /*0020*/                   HFMA2 R4, R4, R7, R8 ;\n\
.L_x_2:\n\
        /*0030*/                   ELECT P1, URZ, PT ;\n\
        /*0040*/               @P1 UBLKCP.S.G [UR4], [UR6], UR8 ;\n\
        /*0050*/              @!P0 BRA `(.L_x_2) ;\n\
        /*0060*/                   UIADD3 UR18, UR6, 0x10, URZ ;\n\
        /*0070*/                   HGMMA.64x24x16.F32 R24, R52, gdesc[UR16], R24 ;\n\
        /*0080*/                   IMAD.MOV.U32 R9, RZ, RZ, R10 ;\n\
        /*0090*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;\n\
        /*00a0*/                   FFMA R3, R2, R1, R3 ;\n\
        /*00b0*/               @P2 BRA `(.L_x_1) ;\n\
        /*00c0*/                   EXIT ;\n\
//--------------------- .text.plain --------------------------\n\
.text.plain:\n\
        /*0000*/                   MOV R1, R2 ;\n\
        /*0010*/                   EXIT ;\n";

    #[test]
    fn parses_functions_labels_and_guards() {
        let fs = parse_disassembly(LISTING);
        assert_eq!(fs.len(), 2);
        assert_eq!(fs[0].name, "qmm_demo");
        assert_eq!(fs[0].instrs.len(), 13);
        assert_eq!(fs[0].labels.get(".L_x_1"), Some(&0x10));
        assert_eq!(fs[0].labels.get(".L_x_2"), Some(&0x30));
        // The guard is dropped, the opcode kept.
        assert_eq!(fs[0].instrs[4].text, "UBLKCP.S.G [UR4], [UR6], UR8");
        assert_eq!(fs[0].instrs[4].base(), "UBLKCP");
        assert_eq!(fs[1].name, "plain");
        assert!(loops(&fs[1]).is_empty());
        assert_eq!(hot_loop(&fs[1]), None);
    }

    #[test]
    fn finds_loops_and_picks_the_one_with_the_tensor_products() {
        let fs = parse_disassembly(LISTING);
        let f = &fs[0];
        assert_eq!(loops(f), vec![Loop { start: 0x10, end: 0xb0 }, Loop { start: 0x30, end: 0x50 }]);
        // The inner copy loop is the smaller one, but the outer holds the product.
        assert_eq!(hot_loop(f), Some(Loop { start: 0x10, end: 0xb0 }));
        let c = census(body(f, &Loop { start: 0x10, end: 0xb0 }));
        let get = |k| c.get(&k).copied().unwrap_or(0);
        assert_eq!(
            [get(Class::Tensor), get(Class::Unpack), get(Class::Uniform), get(Class::Move), get(Class::Sync)],
            [1, 2, 1, 1, 1]
        );
        assert_eq!((get(Class::Memory), get(Class::Control), get(Class::Float)), (1, 3, 1));
        assert_eq!(c.values().sum::<u32>(), 11);
    }

    #[test]
    fn parses_options() {
        let o = SassOptions::parse(&["--loops".into(), "qmm_q4k".into(), "--features".into(), "x".into()]).unwrap();
        assert_eq!(
            o,
            SassOptions {
                arch: "sm_90a".into(),
                features: "x".into(),
                all_loops: true,
                kernels: vec!["qmm_q4k".into()]
            }
        );
        assert!(SassOptions::parse(&["--bogus".into()]).is_err());
    }
}
