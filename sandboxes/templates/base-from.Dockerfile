# taskforge base image on top of an image the user names (`taskforge sandbox build-base --from IMAGE`).
# It must provide python3 with venv; git is installed if missing (needs network at build time,
# which users with a registry have).
FROM {from_image}
USER root
RUN set -eu; \
    if ! command -v git >/dev/null; then \
        (apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*) \
        || (apk add --no-cache git); \
    fi; \
    python3 -m venv --help >/dev/null; \
    (getent group 10001 >/dev/null || groupadd -g 10001 sandbox 2>/dev/null || addgroup -g 10001 sandbox); \
    (getent passwd 10001 >/dev/null || useradd -u 10001 -g 10001 -d /home/sandbox -M sandbox 2>/dev/null \
        || adduser -D -u 10001 -G sandbox -h /home/sandbox sandbox); \
    mkdir -p /workspace /home/sandbox /opt; chown 10001:10001 /workspace /home/sandbox
ENV LANG=C.UTF-8
LABEL taskforge.base.recipe="{recipe_hash}"
