/** The people pages' script: the forms of joining and of resetting a password (the landing page needs none). */
import "../../shared/browser/pages.css";
