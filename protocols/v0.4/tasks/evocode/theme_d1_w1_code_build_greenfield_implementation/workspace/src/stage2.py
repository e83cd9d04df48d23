# stage 2 (round 1)
# theme_d1_w1_code_build_greenfield_implementation-stage2-keep
