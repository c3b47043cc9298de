# Kubernetes client fuzz targets (owner: kube): the watch framer (split-point independence) and kubeconfig
# parsing (plus ExecCredential and RFC 3339 on the same bytes).
gpuslice_fuzz(watch_framer DEPS gpuslice_kube)
gpuslice_fuzz(kubeconfig DEPS gpuslice_kube)
