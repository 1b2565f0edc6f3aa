fn main() {
    lalrpop::Configuration::new()
        .set_in_dir("grammar")
        .set_out_dir(std::env::var("OUT_DIR").unwrap())
        .process()
        .expect("lalrpop failed to process grammar/");
    println!("cargo:rerun-if-changed=grammar");
}
