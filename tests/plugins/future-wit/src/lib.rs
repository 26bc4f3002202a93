//! Exports `vagen:env/env@9.0.0`: the loader must report a WIT version mismatch, naming
//! both versions, instead of a generic type error.

#[cfg(target_family = "wasm")]
mod component {
    wit_bindgen::generate!({
        inline: "
            package vagen:env@9.0.0;
            interface env {
                hello: func() -> string;
            }
            world environment {
                export env;
            }
        ",
        world: "environment",
    });

    struct Future;

    impl exports::vagen::env::env::Guest for Future {
        fn hello() -> String {
            "from the future".into()
        }
    }

    export!(Future);
}
