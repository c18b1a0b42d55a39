//! Textual LLVM-IR rewrites that stock rustc cannot express for NVPTX.
//!
//! Applied by the linker between `llvm-link`/`llvm-dis` and `opt`:
//!
//! 1. **Shared memory.** A global with `section ".shared"` moves to `addrspace(3)`; its
//!    initialiser must be `undef`/`poison` (shared memory cannot be initialised; a non-zero one is
//!    rejected, `zeroinitializer` is replaced by `undef`), its alignment becomes at least 16, and
//!    every use `@X` becomes `addrspacecast (ptr addrspace(3) @X to ptr)`. An external global
//!    whose name starts with `__dynamic_smem` becomes
//!    `external addrspace(3) global [0 x i8], align 16` (CUDA's `extern __shared__`).
//! 2. **Convergence.** Every inline-asm call site gets the `convergent` attribute, so LLVM never
//!    duplicates or sinks `shfl.sync`, `bar.sync`, `mma.sync`, `ldmatrix` across divergent
//!    branches (rustc marks functions convergent, but not asm call sites).
//! 3. **Launch bounds.** `section "nvvm:maxntid=128;minctasm=1;maxnreg=168"` on a kernel
//!    definition becomes the function attributes `"nvvm.maxntid"="128" "nvvm.minctasm"="1"
//!    "nvvm.maxnreg"="168"` (`__launch_bounds__`). Keys allowed: `maxntid`, `minctasm`, `maxnreg`,
//!    `reqntid`.

use std::collections::BTreeSet;

/// What a rewrite changed, for the report file `irfix.txt`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FixReport {
    pub shared_statics: Vec<String>,
    pub dynamic_smem: Vec<String>,
    pub convergent_asm_calls: usize,
    pub launch_bounds: Vec<(String, String)>,
}

impl std::fmt::Display for FixReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "shared statics moved to addrspace(3): {}", self.shared_statics.len())?;
        for s in &self.shared_statics {
            writeln!(f, "  {s}")?;
        }
        writeln!(f, "dynamic shared memory externs: {:?}", self.dynamic_smem)?;
        writeln!(f, "inline-asm call sites marked convergent: {}", self.convergent_asm_calls)?;
        for (k, b) in &self.launch_bounds {
            writeln!(f, "launch bounds {k}: {b}")?;
        }
        Ok(())
    }
}

/// Applies all three rewrites to a module's textual IR.
pub fn fix_module(ir: &str) -> Result<(String, FixReport), String> {
    let mut report = FixReport::default();
    let mut shared: BTreeSet<String> = BTreeSet::new();
    let mut lines: Vec<String> = Vec::with_capacity(ir.lines().count());

    for line in ir.lines() {
        if let Some(name) = global_name(line) {
            if line.contains("section \".shared\"") {
                lines.push(rewrite_shared_global(line, &name)?);
                report.shared_statics.push(name.clone());
                shared.insert(name);
                continue;
            }
            if bare_name(&name).starts_with("__dynamic_smem") && line.contains(" external ") {
                lines.push(format!("{name} = external addrspace(3) global [0 x i8], align 16"));
                report.dynamic_smem.push(name.clone());
                shared.insert(name);
                continue;
            }
        }
        let mut out = line.to_string();
        if line.starts_with("define ") && line.contains("section \"nvvm:") {
            let (fixed, kernel, bounds) = rewrite_launch_bounds(&out)?;
            report.launch_bounds.push((kernel, bounds));
            out = fixed;
        }
        if out.contains(" asm ") {
            let (fixed, n) = mark_asm_convergent(&out)?;
            report.convergent_asm_calls += n;
            out = fixed;
        }
        lines.push(out);
    }

    // Second pass: uses of the shared globals become generic pointers via addrspacecast.
    if !shared.is_empty() {
        for line in lines.iter_mut() {
            let defines = global_name(line).is_some_and(|n| shared.contains(&n));
            if defines {
                continue;
            }
            for name in &shared {
                if line.contains(name.as_str()) {
                    *line = replace_uses(line, name);
                }
            }
        }
    }
    let mut text = lines.join("\n");
    text.push('\n');
    Ok((text, report))
}

/// `@name` when the line defines or declares a global variable (`@x = ... global|constant ...`).
fn global_name(line: &str) -> Option<String> {
    if !line.starts_with('@') {
        return None;
    }
    let end = ident_end(line, 0)?;
    let rest = &line[end..];
    let rest = rest.strip_prefix(" = ")?;
    let is_var = rest.split_whitespace().any(|w| w == "global" || w == "constant");
    is_var.then(|| line[..end].to_string())
}

/// End (exclusive) of the identifier `@name` or `@"quoted name"` that starts at `start`.
fn ident_end(s: &str, start: usize) -> Option<usize> {
    let b = s.as_bytes();
    if b.get(start) != Some(&b'@') {
        return None;
    }
    if b.get(start + 1) == Some(&b'"') {
        let close = s[start + 2..].find('"')?;
        return Some(start + 2 + close + 1);
    }
    let mut i = start + 1;
    while i < b.len() && is_ident_byte(b[i]) {
        i += 1;
    }
    (i > start + 1).then_some(i)
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'$' | b'-')
}

fn bare_name(name: &str) -> &str {
    name.trim_start_matches('@').trim_matches('"')
}

/// `@X = [linkage] global T init, section ".shared", align N` →
/// `@X = [linkage] addrspace(3) global T undef, align max(N,16)`.
fn rewrite_shared_global(line: &str, name: &str) -> Result<String, String> {
    let after_eq = &line[name.len() + 3..];
    let kw = if let Some(p) = find_word(after_eq, "global") {
        p
    } else {
        return Err(format!("shared static {name}: expected `global` in `{line}`"));
    };
    let linkage = after_eq[..kw].trim_end();
    let body = &after_eq[kw + "global".len()..];
    // body = " T init, section ".shared", align N[, ...]"
    let parts = split_top_level(body);
    let head = parts
        .first()
        .ok_or_else(|| format!("shared static {name}: cannot parse `{line}`"))?
        .trim();
    let (ty, init) = split_type_and_init(head)
        .ok_or_else(|| format!("shared static {name}: cannot split type and initialiser in `{head}`"))?;
    let init_ok = matches!(init, "undef" | "poison" | "zeroinitializer");
    if !init_ok {
        return Err(format!(
            "shared static {name} has initialiser `{init}`: shared memory cannot be initialised; \
             use MaybeUninit (Shared::uninit())"
        ));
    }
    let mut align = 16u64;
    let mut extra = Vec::new();
    for p in &parts[1..] {
        let p = p.trim();
        if p.starts_with("section ") {
            continue;
        }
        if let Some(a) = p.strip_prefix("align ") {
            let a: u64 = a.trim().parse().map_err(|_| format!("bad align in `{line}`"))?;
            align = align.max(a);
            continue;
        }
        extra.push(p.to_string());
    }
    let mut out = format!("{name} = ");
    if !linkage.is_empty() {
        out.push_str(linkage);
        out.push(' ');
    }
    out.push_str(&format!("addrspace(3) global {ty} undef, align {align}"));
    for e in extra {
        out.push_str(", ");
        out.push_str(&e);
    }
    Ok(out)
}

/// Position of `word` as a whitespace-separated word.
fn find_word(s: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = s[from..].find(word) {
        let at = from + p;
        let before_ok = at == 0 || s.as_bytes()[at - 1] == b' ';
        let end = at + word.len();
        let after_ok = end == s.len() || s.as_bytes()[end] == b' ';
        if before_ok && after_ok {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// Splits on commas that are not inside brackets, braces, angle brackets, parens or strings.
fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut in_str = false;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '"' => in_str = !in_str,
            '[' | '{' | '<' | '(' if !in_str => depth += 1,
            ']' | '}' | '>' | ')' if !in_str => depth -= 1,
            ',' if !in_str && depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out
}

/// `"<{ [64 x i8] }> undef"` → (`<{ [64 x i8] }>`, `undef`): the initialiser is the last token
/// at bracket depth zero.
fn split_type_and_init(s: &str) -> Option<(&str, &str)> {
    let mut depth = 0i32;
    let mut last_space = None;
    for (i, c) in s.char_indices() {
        match c {
            '[' | '{' | '<' | '(' => depth += 1,
            ']' | '}' | '>' | ')' => depth -= 1,
            ' ' if depth == 0 => last_space = Some(i),
            _ => {}
        }
    }
    let sp = last_space?;
    Some((s[..sp].trim(), s[sp + 1..].trim()))
}

/// Replaces each use of `name` (a whole identifier) by an addrspacecast to a generic pointer.
fn replace_uses(line: &str, name: &str) -> String {
    let mut out = String::with_capacity(line.len() + 64);
    let mut i = 0;
    let b = line.as_bytes();
    while let Some(p) = line[i..].find(name) {
        let at = i + p;
        let end = at + name.len();
        let whole = end == b.len() || !is_ident_byte(b[end]) || name.ends_with('"');
        out.push_str(&line[i..at]);
        if whole {
            out.push_str(&format!("addrspacecast (ptr addrspace(3) {name} to ptr)"));
        } else {
            out.push_str(name);
        }
        i = end;
    }
    out.push_str(&line[i..]);
    out
}

/// Adds `convergent` after the argument list of every `asm` call on the line.
fn mark_asm_convergent(line: &str) -> Result<(String, usize), String> {
    let mut out = String::with_capacity(line.len() + 16);
    let mut rest = line;
    let mut n = 0;
    while let Some(p) = rest.find(" asm ") {
        // Only call sites: `call ... asm` (not e.g. module-level `module asm`).
        let prefix = &rest[..p];
        if !prefix.contains("call ") {
            out.push_str(&rest[..p + 5]);
            rest = &rest[p + 5..];
            continue;
        }
        let after = &rest[p + 5..];
        // Skip the asm string and the constraint string: two quoted strings.
        let close = skip_strings(after, 2)
            .ok_or_else(|| format!("cannot parse asm call site `{line}`"))?;
        let args_start = after[close..]
            .find('(')
            .map(|q| close + q)
            .ok_or_else(|| format!("no argument list in asm call `{line}`"))?;
        let args_end = matching_paren(after, args_start)
            .ok_or_else(|| format!("unbalanced argument list in asm call `{line}`"))?;
        out.push_str(&rest[..p + 5]);
        out.push_str(&after[..=args_end]);
        let tail = &after[args_end + 1..];
        if !tail.trim_start().starts_with("convergent") {
            out.push_str(" convergent");
            n += 1;
        }
        rest = tail;
    }
    out.push_str(rest);
    Ok((out, n))
}

/// Index just past the `count`-th closing quote (IR strings escape `"` as `\22`).
fn skip_strings(s: &str, count: usize) -> Option<usize> {
    let mut seen = 0;
    let mut in_str = false;
    for (i, c) in s.char_indices() {
        if c == '"' {
            in_str = !in_str;
            if !in_str {
                seen += 1;
                if seen == count {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}

fn matching_paren(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut in_str = false;
    for (i, c) in s[open..].char_indices() {
        match c {
            '"' => in_str = !in_str,
            '(' if !in_str => depth += 1,
            ')' if !in_str => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `define ... @k(...) #0 section "nvvm:maxntid=256;minctasm=1" {` →
/// `define ... @k(...) #0 "nvvm.maxntid"="256" "nvvm.minctasm"="1" {`.
fn rewrite_launch_bounds(line: &str) -> Result<(String, String, String), String> {
    let start = line.find("section \"nvvm:").ok_or("no nvvm section")?;
    let spec_start = start + "section \"nvvm:".len();
    let spec_len = line[spec_start..]
        .find('"')
        .ok_or_else(|| format!("unterminated nvvm section in `{line}`"))?;
    let spec = &line[spec_start..spec_start + spec_len];
    let mut attrs = Vec::new();
    for kv in spec.split(';').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("launch bound `{kv}` is not key=value in `{line}`"))?;
        if !matches!(k, "maxntid" | "minctasm" | "maxnreg" | "reqntid") {
            return Err(format!("unknown launch bound `{k}` (allowed: maxntid, minctasm, maxnreg, reqntid)"));
        }
        if v.is_empty() || !v.split(',').all(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit())) {
            return Err(format!("launch bound `{k}` needs numbers, got `{v}`"));
        }
        attrs.push(format!("\"nvvm.{k}\"=\"{v}\""));
    }
    let kernel = line
        .find('@')
        .and_then(|a| ident_end(line, a).map(|e| line[a..e].to_string()))
        .unwrap_or_default();
    let end = spec_start + spec_len + 1;
    let fixed = format!("{}{}{}", &line[..start], attrs.join(" "), &line[end..]);
    Ok((fixed, kernel, spec.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_static_moves_to_addrspace_3_and_uses_are_cast() {
        let ir = "@_ZN3k4BUF17h0E = internal global <{ [1024 x i8] }> undef, section \".shared\", align 4\n\
                  define void @f() {\n  %p = getelementptr inbounds i8, ptr @_ZN3k4BUF17h0E, i64 8\n  store float 1.0, ptr @_ZN3k4BUF17h0E, align 4\n  ret void\n}\n";
        let (out, rep) = fix_module(ir).unwrap();
        assert!(out.contains(
            "@_ZN3k4BUF17h0E = internal addrspace(3) global <{ [1024 x i8] }> undef, align 16"
        ));
        assert!(!out.contains("section \".shared\""));
        assert!(out.contains("ptr addrspacecast (ptr addrspace(3) @_ZN3k4BUF17h0E to ptr), i64 8"));
        assert!(out.contains("store float 1.0, ptr addrspacecast (ptr addrspace(3) @_ZN3k4BUF17h0E to ptr)"));
        assert_eq!(rep.shared_statics, vec!["@_ZN3k4BUF17h0E".to_string()]);
    }

    #[test]
    fn shared_static_keeps_larger_alignment_and_zero_init_becomes_undef() {
        let ir = "@S = internal global [4 x i32] zeroinitializer, section \".shared\", align 64\n";
        let (out, _) = fix_module(ir).unwrap();
        assert!(out.contains("@S = internal addrspace(3) global [4 x i32] undef, align 64"), "{out}");
    }

    #[test]
    fn initialised_shared_static_is_rejected() {
        let ir = "@S = internal global [2 x i32] [i32 1, i32 2], section \".shared\", align 4\n";
        let err = fix_module(ir).unwrap_err();
        assert!(err.contains("cannot be initialised"), "{err}");
    }

    #[test]
    fn uses_of_similar_names_are_not_touched() {
        let ir = "@A = internal global [4 x i8] undef, section \".shared\", align 4\n\
                  @AB = internal global [4 x i8] undef, align 4\n\
                  define void @f() {\n  store i8 0, ptr @AB, align 1\n  store i8 0, ptr @A, align 1\n  ret void\n}\n";
        let (out, _) = fix_module(ir).unwrap();
        assert!(out.contains("store i8 0, ptr @AB, align 1"));
        assert!(out.contains("store i8 0, ptr addrspacecast (ptr addrspace(3) @A to ptr), align 1"));
        assert!(out.contains("@AB = internal global [4 x i8] undef, align 4"));
    }

    #[test]
    fn dynamic_smem_extern_becomes_extern_shared() {
        let ir = "@__dynamic_smem = external global [0 x i8], align 1\n\
                  define void @f() {\n  %v = load i32, ptr @__dynamic_smem, align 4\n  ret void\n}\n";
        let (out, rep) = fix_module(ir).unwrap();
        assert!(out.contains("@__dynamic_smem = external addrspace(3) global [0 x i8], align 16"));
        assert!(out.contains("load i32, ptr addrspacecast (ptr addrspace(3) @__dynamic_smem to ptr), align 4"));
        assert_eq!(rep.dynamic_smem, vec!["@__dynamic_smem".to_string()]);
    }

    #[test]
    fn asm_call_sites_become_convergent() {
        let ir = "  %r = tail call i32 asm sideeffect \"shfl.sync.bfly.b32 $0, $1, $2, 0x1f, 0xffffffff;\", \"=r,r,r\"(i32 %a, i32 %b) #4, !srcloc !7\n\
                  \x20 call void asm sideeffect \"bar.warp.sync 0xffffffff;\", \"\"() #5\n\
                  \x20 %x = call i32 @not_asm(i32 1)\n";
        let (out, rep) = fix_module(ir).unwrap();
        assert!(out.contains("(i32 %a, i32 %b) convergent #4, !srcloc !7"), "{out}");
        assert!(out.contains("\"\"() convergent #5"), "{out}");
        assert!(out.contains("%x = call i32 @not_asm(i32 1)\n"));
        assert_eq!(rep.convergent_asm_calls, 2);
        // Idempotent.
        let (again, rep2) = fix_module(&out).unwrap();
        assert_eq!(again, out);
        assert_eq!(rep2.convergent_asm_calls, 0);
    }

    #[test]
    fn asm_with_parens_inside_strings_and_args() {
        let ir = "  %r = call { i32, i32 } asm \"mov.b64 {$0,$1}, (x);\", \"=r,=r,l\"(i64 ptrtoint (ptr @g to i64)) #1\n";
        let (out, rep) = fix_module(ir).unwrap();
        assert!(out.contains("(i64 ptrtoint (ptr @g to i64)) convergent #1"), "{out}");
        assert_eq!(rep.convergent_asm_calls, 1);
    }

    #[test]
    fn launch_bounds_section_becomes_nvvm_attributes() {
        let ir = "define ptx_kernel void @gemv(ptr %x) unnamed_addr #0 section \"nvvm:maxntid=256;minctasm=1;maxnreg=64\" {\n";
        let (out, rep) = fix_module(ir).unwrap();
        assert!(out.contains(
            "#0 \"nvvm.maxntid\"=\"256\" \"nvvm.minctasm\"=\"1\" \"nvvm.maxnreg\"=\"64\" {"
        ), "{out}");
        assert_eq!(rep.launch_bounds, vec![("@gemv".into(), "maxntid=256;minctasm=1;maxnreg=64".into())]);
    }

    #[test]
    fn bad_launch_bounds_are_rejected() {
        let ir = "define ptx_kernel void @k() #0 section \"nvvm:maxthreads=256\" {\n";
        assert!(fix_module(ir).unwrap_err().contains("unknown launch bound"));
        let ir = "define ptx_kernel void @k() #0 section \"nvvm:maxntid=abc\" {\n";
        assert!(fix_module(ir).unwrap_err().contains("needs numbers"));
    }

    #[test]
    fn quoted_names_are_handled() {
        let ir = "@\"sh.x\" = internal global [8 x i8] undef, section \".shared\", align 8\n  store i8 0, ptr @\"sh.x\", align 1\n";
        let (out, _) = fix_module(ir).unwrap();
        assert!(out.contains("@\"sh.x\" = internal addrspace(3) global [8 x i8] undef, align 16"), "{out}");
        assert!(out.contains("ptr addrspacecast (ptr addrspace(3) @\"sh.x\" to ptr)"), "{out}");
    }
}
