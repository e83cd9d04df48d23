// simple-ts-slugify: implement the five requirements in src/
