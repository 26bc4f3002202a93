//! The PrimitiveSkill plugin's Python side: ManiSkill 3 in `.venv-maniskill`, and Mesa's
//! lavapipe (a Vulkan driver on the CPU) unpacked into it, so images render without a GPU.
//!
//! A venv beside the project's rather than inside it: mani-skill 3.0.1 predates
//! Gymnasium 1.x, which the Python package's tests need, so each venv keeps its own
//! Gymnasium. Torch is not installed twice: a `.pth` file puts the project venv's
//! site-packages after the worker venv's own, so the worker imports the very torch 2.11.0
//! the host links (and pip, seeing it, installs none).

use std::path::PathBuf;
use std::process::Command;

use crate::{Result, pip_install, python_output, python_prints, root, run, venv_python};

const MANI_SKILL: &str = "mani-skill==3.0.1";
const SAPIEN: &str = "sapien==3.0.3";
const GYMNASIUM: &str = "gymnasium==0.29.1";

/// Debian 12's own lavapipe (Mesa 22.3) lacks `descriptorBindingPartiallyBound`, which
/// SAPIEN's renderer needs; bookworm-backports' Mesa 25 has it, with the libdrm it links.
const DEBIAN_POOL: &str = "http://deb.debian.org/debian/pool/main";
const LAVAPIPE_DEBS: [&str; 3] = [
    "m/mesa/mesa-vulkan-drivers_25.0.7-2~bpo12+1_amd64.deb",
    "libd/libdrm/libdrm2_2.4.123-1~bpo12+1_amd64.deb",
    "libd/libdrm/libdrm-amdgpu1_2.4.123-1~bpo12+1_amd64.deb",
];

pub fn venv() -> PathBuf {
    root().join(".venv-maniskill")
}

fn python() -> PathBuf {
    venv().join("bin").join("python")
}

/// The worker venv and the CPU renderer, each unless already there.
pub fn setup() -> Result<()> {
    setup_venv()?;
    setup_lavapipe()
}

fn setup_venv() -> Result<()> {
    let probe = "import importlib.metadata as m, torch; \
                 print(m.version('mani-skill'), m.version('sapien'), m.version('gymnasium'), torch.__version__.split('+')[0])";
    let want = "3.0.1 3.0.3 0.29.1 2.11.0";
    if python_prints(&python(), probe, want) {
        return Ok(());
    }
    if !python().is_file() {
        let mut cmd = Command::new(venv_python());
        cmd.args(["-m", "venv"]).arg(venv());
        run(cmd)?;
    }
    let site_packages = "import sysconfig; print(sysconfig.get_paths()['purelib'])";
    let project_site = python_output(&venv_python(), site_packages)?;
    let pth = PathBuf::from(python_output(&python(), site_packages)?).join("vagen-host-torch.pth");
    std::fs::write(&pth, format!("{project_site}\n")).map_err(|e| format!("writing {}: {e}", pth.display()))?;
    let mut pip = pip_install(&python());
    pip.args([MANI_SKILL, SAPIEN, GYMNASIUM]);
    run(pip)
}

/// `.venv-maniskill/lavapipe/`: the driver and its libdrm in `lib/`, and `lvp_icd.json`
/// naming the driver by absolute path (the plugin points `VK_ICD_FILENAMES` at it).
fn setup_lavapipe() -> Result<()> {
    let dest = venv().join("lavapipe");
    let icd = dest.join("lvp_icd.json");
    if icd.is_file() {
        return Ok(());
    }
    let tmp = root().join("target").join("lavapipe-deb");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    for deb in LAVAPIPE_DEBS {
        let mut curl = Command::new("curl");
        curl.current_dir(&tmp).args(["-sSfLO", &format!("{DEBIAN_POOL}/{deb}")]);
        run(curl)?;
        let file = tmp.join(deb.rsplit('/').next().expect("a path"));
        let mut x = Command::new("dpkg-deb");
        x.arg("-x").arg(&file).arg(tmp.join("root"));
        run(x)?;
    }
    let lib = dest.join("lib");
    std::fs::create_dir_all(&lib).map_err(|e| format!("creating {}: {e}", lib.display()))?;
    let unpacked = tmp.join("root/usr/lib/x86_64-linux-gnu");
    for name in ["libvulkan_lvp.so", "libdrm.so.2", "libdrm_amdgpu.so.1"] {
        // Copied, not linked: `.so.2` names are symlinks in the package.
        let from = std::fs::canonicalize(unpacked.join(name)).map_err(|e| format!("{name} in the packages: {e}"))?;
        std::fs::copy(&from, lib.join(name)).map_err(|e| format!("copying {}: {e}", from.display()))?;
    }
    let json = format!(
        "{{\"file_format_version\": \"1.0.0\", \"ICD\": {{\"library_path\": {:?}, \"api_version\": \"1.4.305\"}}}}\n",
        lib.join("libvulkan_lvp.so").display().to_string()
    );
    std::fs::write(&icd, json).map_err(|e| format!("writing {}: {e}", icd.display()))?;
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("CPU renderer: {}", icd.display());
    Ok(())
}
