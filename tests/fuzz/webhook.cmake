# Webhook core fuzz targets (owner: webhook core). Oracles use nlohmann-json's independent RFC 6902 applier.
find_package(nlohmann_json 3.11 REQUIRED)
gpuslice_fuzz(admission_review DEPS gpuslice_webhook_core nlohmann_json::nlohmann_json)
gpuslice_fuzz(mutation_policy DEPS gpuslice_webhook_core nlohmann_json::nlohmann_json)
