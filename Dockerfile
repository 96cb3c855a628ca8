# quotaqual container image: the static quotaqual binary on scratch (no base image is pulled,
# so it builds without a registry).
#
#   make image    # CGO_ENABLED=0 GOOS=linux build into bin/image/quotaqual, then
#                 # docker build -t quotaqual:$(VERSION) -t quotaqual:dev .
#
# With a registry, Dockerfile.multistage builds the same image from source:
#   docker build -f Dockerfile.multistage -t quotaqual:dev .
#
# The docker topology relies on this contract: the binary at /quotaqual, ENTRYPOINT /quotaqual.
# Run it with `--image quotaqual:dev` (topology.Spec.QuotaqualImage); without one, the topology
# packs the running quotaqual binary into quotaqual:bin-<digest> itself.
FROM scratch
COPY bin/image/quotaqual /quotaqual
USER 65532:65532
ENTRYPOINT ["/quotaqual"]
LABEL org.quotaqual.managed="true" org.opencontainers.image.title="quotaqual" \
      org.opencontainers.image.source="https://github.com/quotaqual/quotaqual"
