extern crate llama_cpp_sys_2;
