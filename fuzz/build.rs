//! Copies `parse_size` (the byte-size parser of `--mem-limit`, `--max-bytes`,
//! `--memory`) out of the `tcc` binary's `src/main.rs`, which the fuzz targets
//! cannot link, so that the `parsers` target fuzzes the very function.
fn main() {
    let main_rs = concat!(env!("CARGO_MANIFEST_DIR"), "/../src/main.rs");
    println!("cargo:rerun-if-changed={main_rs}");
    let text = std::fs::read_to_string(main_rs).expect("../src/main.rs");
    let start = text.find("\nfn parse_size(").expect("`fn parse_size(` in src/main.rs") + 1;
    let len = text[start..].find("\n}\n").expect("the end of `parse_size`") + 3;
    let out = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("parse_size.rs");
    std::fs::write(out, format!("pub {}", &text[start..start + len])).unwrap();
}
