# syntax=docker/dockerfile:1
#
# HarnessFacts images, one Dockerfile, three targets:
#
#   docker build --target controller         -t harnessfacts:dev .
#   docker build --target node-agent         -t harnessfacts-node-agent:dev .
#   docker buildx build --platform windows/amd64 --target node-agent-windows -t harnessfacts-windows:dev .
#
# controller: the static binary alone on a distroless base (no shell, no
# package manager), run as a non-root uid. node-agent: harnessfacts-node-agent
# (the node-agent's commands alone, which idles in two thirds of the
# memory) as the entry point, harnessfacts beside it for kubectl exec, plus
# bubblewrap, Node.js, Python and the pinned agent CLIs, installed by
# hack/install-agent-clis.sh, the script CI runs too. node-agent-windows: the
# Windows binary for the HostProcess DaemonSet.
#
# VERSION is what `harnessfacts version` prints; set it from the git tag.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-trixie AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETARCH
# CGO off: a static binary runs on the distroless base and on any node.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X github.com/harnessfacts/harnessfacts/internal/version.Version=${VERSION}" \
      -o /out/linux/ ./cmd/harnessfacts ./cmd/harnessfacts-full ./cmd/harnessfacts-node-agent ./cmd/harnessfacts-sandbox-init && \
    CGO_ENABLED=0 GOOS=windows GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X github.com/harnessfacts/harnessfacts/internal/version.Version=${VERSION}" \
      -o /out/windows/ ./cmd/harnessfacts-full ./cmd/harnessfacts-sandbox-init

# ---- controller -------------------------------------------------------------
FROM gcr.io/distroless/static-debian12:nonroot AS controller
# harnessfacts serves run and version itself and hands every other
# command (controller among them) to harnessfacts-full beside it, by exec.
COPY --from=build /out/linux/harnessfacts /harnessfacts
COPY --from=build /out/linux/harnessfacts-full /harnessfacts-full
# 65532 is distroless' "nonroot"; the chart runs it as that uid too.
USER 65532:65532
ENTRYPOINT ["/harnessfacts"]
CMD ["controller", "--leader-elect"]

# ---- node-agent -------------------------------------------------------------
# Debian trixie gives bubblewrap, slirp4netns (egress Unrestricted's
# user-mode network stack) and Node.js 20 (Gemini CLI needs >= 20);
# the python:3.12 base gives a Python that aider-chat accepts (3.10-3.12;
# trixie's own is 3.13).
FROM python:3.12-slim-trixie AS node-agent
RUN apt-get update && \
    apt-get install -y --no-install-recommends bubblewrap slirp4netns nodejs npm ca-certificates git && \
    rm -rf /var/lib/apt/lists/*
COPY hack/install-agent-clis.sh /usr/local/lib/harnessfacts/install-agent-clis.sh
# Every CLI at its pinned version into /opt/harnessfacts/agents; the script
# fails when a CLI does not report the pinned version. The sandbox gives each
# agent a fixed PATH (the node-agent's DefaultPath, /usr/local/bin first), so
# the commands are linked there too; the links still resolve when the chart
# mounts other CLIs at /opt/harnessfacts/agents. Caches are dropped so they do
# not ship in the image.
RUN PYTHON=python3.12 /usr/local/lib/harnessfacts/install-agent-clis.sh /opt/harnessfacts/agents && \
    ln -s /opt/harnessfacts/agents/bin/* /usr/local/bin/ && \
    npm cache clean --force && rm -rf /root/.cache /root/.npm
COPY --from=build /out/linux/harnessfacts-node-agent /usr/local/bin/harnessfacts-node-agent
COPY --from=build /out/linux/harnessfacts /usr/local/bin/harnessfacts
COPY --from=build /out/linux/harnessfacts-full /usr/local/bin/harnessfacts-full
# Beside them, the small program each sandbox starts first (the executor
# looks for it in the binary's folder).
COPY --from=build /out/linux/harnessfacts-sandbox-init /usr/local/bin/harnessfacts-sandbox-init
ENV PATH=/opt/harnessfacts/agents/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Root in the pod's user namespace (see the chart's node-agent DaemonSet):
# it manages cgroups and drops each agent to an unprivileged uid.
USER 0:0
ENTRYPOINT ["/usr/local/bin/harnessfacts-node-agent"]
CMD ["node-agent"]

# ---- node-agent-windows -----------------------------------------------------
# HostProcess containers run on the host; the image only carries the binary.
FROM mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:v1.0.0 AS node-agent-windows
# harnessfacts-full.exe itself: harnessfacts.exe would run it as a child
# (Windows has no exec), a process more between the node-agent and its stop.
COPY --from=build /out/windows/harnessfacts-full.exe /harnessfacts-full.exe
COPY --from=build /out/windows/harnessfacts-sandbox-init.exe /harnessfacts-sandbox-init.exe
ENTRYPOINT ["harnessfacts-full.exe"]
CMD ["node-agent"]
