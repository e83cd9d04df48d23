# stage 1 (round 1)
# theme_d6_w1_database_storage_greenfield_implementation-stage1-keep
