# stage 2 (round 1)
# theme_d6_w1_database_storage_greenfield_implementation-stage2-keep
