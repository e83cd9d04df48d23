# demo-simple-5: implement the five requirements in src/
