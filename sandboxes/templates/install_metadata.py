"""Usage: install_metadata.py PROJECT_DIR VENV WORKSPACE

Runs inside the environment image build (and for the host reference venv): installs a project's metadata without its code.

The project's packages stay out of the image. A ``.pth`` file points the interpreter at the
import roots under /workspace where the code is copied at run time; the dist-info makes
``importlib.metadata`` see the project (many packages read their own version that way); console
scripts are written as small wrappers, as pip would.
"""

import json
import shutil
import sys
import sysconfig
from pathlib import Path

project, venv, workspace = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
spec = json.loads((project / "metadata.json").read_text())

roots = [(workspace / root).as_posix() for root in spec["import_roots"]]
(site / "_taskforge_project.pth").write_text("".join(f"{root}\n" for root in roots))
for dist_info in (project / "dist-info").iterdir():
    target = site / dist_info.name
    shutil.copytree(dist_info, target)
    # RECORD would list code files that are not installed; keep it honest.
    files = sorted(p.relative_to(site).as_posix() for p in target.rglob("*") if p.is_file())
    (target / "RECORD").write_text("".join(f"{f},,\n" for f in files if not f.endswith("/RECORD")))

for name, target in spec["console_scripts"].items():
    module, _, attr = target.partition(":")
    script = venv / "bin" / name
    script.write_text(
        f"#!{venv}/bin/python\nimport sys\nfrom {module} import {attr.split('.')[0]}\n"
        f"sys.exit({attr}())\n"
    )
    script.chmod(0o755)
