# One environment image per repository: its resolved dependencies and nothing of its code.
# The dependencies are byte-compiled here (pip's default), so no run pays for compiling pytest.
# The code is copied into /workspace at run time; `project/` carries only the project's installed
# metadata (dist-info, console scripts) and a .pth naming where its packages will be found.
# The venv's own pip and setuptools go once the wheels are in (unless the project depends on
# them): they vendor copies of popular projects (distro, more-itertools, packaging, platformdirs,
# tomli, ...), and a task that removes code from one of those would find it there (so would
# ensurepip's wheels, removed below). Containers are offline, so nothing installs at run time.
FROM {base_image} AS build
COPY wheels /tmp/wheels
COPY project /tmp/project
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/python -m pip install --no-index --no-deps --no-cache-dir \
        --disable-pip-version-check /tmp/wheels/*.whl \
 && /opt/venv/bin/python /tmp/project/install_metadata.py /tmp/project /opt/venv /workspace \
 && for tool in setuptools pip; do \
        ls /tmp/wheels | grep -qi "^$tool-" \
        || /opt/venv/bin/python -m pip uninstall -y -q --disable-pip-version-check "$tool" || exit 1; \
    done

FROM {base_image}
COPY --from=build /opt/venv /opt/venv
# ensurepip's wheels hold the same vendored copies, zipped.
RUN rm -rf /usr/share/python-wheels
ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin \
    VIRTUAL_ENV=/opt/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp/home \
    LANG=C.UTF-8
LABEL {labels}
