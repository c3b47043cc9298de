# Scheduling core fuzz targets (owner: scheduler core): the two annotation decoders the loop feeds with whatever the
# cluster holds, and the snapshot + schedule path they lead into.
gpuslice_fuzz(node_register DEPS gpuslice_scheduler_core)
gpuslice_fuzz(pod_devices DEPS gpuslice_scheduler_core)
gpuslice_fuzz(snapshot_schedule DEPS gpuslice_scheduler_core)
